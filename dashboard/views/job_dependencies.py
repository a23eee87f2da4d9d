"""A job's upstream and downstream jobs, the job page's panel that refreshes itself while any
of them (or the job) can still change state."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from dashboard.views.common import page_or_partial
from gpuqueue.core.states import FINAL
from gpuqueue.models import Job
from gpuqueue.services.jobs.dependencies import links

PARTIAL = "dashboard/partials/_job_dependencies.html"


def dependencies_context(user: Any, job: Job) -> dict[str, Any]:
    """The panel's context: the links `user` may see, and whether a state shown can change
    (once every job shown has ended, nothing can: the panel stops polling)."""
    shown = links(user, job)
    states = [job.state] + [d["state"] for side in shown.values() for d in side]
    return {"links": shown, "dependencies_live": any(s not in FINAL for s in states)}


@login_required
@require_GET
def job_dependencies(request: HttpRequest, job_id: int) -> HttpResponse:
    # Another team's job is 404, as its page is.
    job = get_object_or_404(Job.objects.visible_to(request.user), pk=job_id)
    context = {"job": job, **dependencies_context(request.user, job)}
    live = bool(context["dependencies_live"])
    return page_or_partial(request, PARTIAL, PARTIAL, context, live=live)
