"""Template helpers: the navigation, reasons as sentences, times as people read them."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html

from dashboard import geometry, job_times
from dashboard.joblist import active_counts
from gpuqueue.client import exit_codes, humane  # the CLI's words for times and exits
from gpuqueue.client.humane import span as _span
from gpuqueue.core.reason_text import describe_reason
from gpuqueue.core.reason_text import reason_label as label_of
from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from teams.models import Membership

register = template.Library()


@register.inclusion_tag("dashboard/partials/_nav.html", takes_context=True)
def nav(context: dict[str, Any]) -> dict[str, Any]:
    """The signed-in user's teams with their role, and the live job counters."""
    request = context["request"]
    user = request.user
    memberships = (
        list(Membership.objects.filter(user=user).select_related("team").order_by("team__slug"))
        if user.is_authenticated
        else []
    )
    return {
        "request": request,
        "user": user,
        "memberships": memberships,
        "counts": active_counts(user),
        "path": request.path,
    }


@register.inclusion_tag("dashboard/partials/_counters.html")
def counters(user: Any, oob: bool = False) -> dict[str, Any]:
    return {"counts": active_counts(user), "oob": oob}


@register.filter
def reason_label(job: Job) -> str:
    """The pending reason's word for lists (empty unless PENDING); its sentence is on the
    job's page and in the word's title."""
    if job.state != JobState.PENDING:
        return ""
    return label_of(job.pending_reason)


@register.filter
def reason_text(job: Job) -> str:
    """The pending reason as one sentence with its numbers (empty unless PENDING)."""
    if job.state != JobState.PENDING:
        return ""
    return describe_reason(job.pending_reason)


@register.filter
def share_fill(cell: geometry.Cell, colours: dict[str, str]) -> str:
    return geometry.share_fill(cell, colours)


@register.filter
def share_title(cell: geometry.Cell) -> str:
    return geometry.share_title(cell)


@register.filter
def gpu_count(value: float) -> str:
    """A number of GPUs as short as it is exact: 2, 0.5, 2.25."""
    return f"{value:g}"


@register.filter
def relative(at: datetime | None) -> str:
    """'in 4 min' or '3 h 05 min ago' from now."""
    return "" if at is None else humane.relative(at, timezone.now())


@register.filter
def waited(job: Job) -> str:
    return _span(job_times.waited_seconds(job, timezone.now()))


@register.filter
def elapsed(job: Job) -> str:
    value = job_times.elapsed_seconds(job, timezone.now())
    return "" if value is None else _span(value)


@register.filter
def gpu_hours(job: Job) -> str:
    value = job_times.gpu_hours(job, timezone.now())
    return "" if value is None else f"{value:,.1f}"


@register.filter
def shell(command: list[str] | None) -> str:
    """A command as a shell would need it typed: `python -c "two words"` stays one argument."""
    return shlex.join(str(part) for part in command or [])


@register.filter
def seconds(value: int | None) -> str:
    return "" if value is None else _span(value)


@register.filter
def get(mapping: dict[Any, Any], key: Any) -> Any:
    return mapping.get(key) if mapping else None


@register.filter
def stamp(at: datetime | None) -> str:
    """The job page's one way to write a time: <time> with '2026-11-28 16:50:23 UTC', which
    static/localtime.js rewrites in the same shape in the viewer's zone."""
    if at is None:
        return ""
    utc = at.astimezone(UTC)
    return format_html(
        '<time datetime="{}" data-local="stamp">{} UTC</time>',
        utc.isoformat(),
        utc.strftime("%Y-%m-%d %H:%M:%S"),
    )


@register.filter
def exit_hint(code: int | None) -> str:
    """What the exit code usually means (137: killed, often out of memory); '' for most."""
    return exit_codes.exit_hint(code)
