"""`{% progress_of job events as p %}`: the job page's clock and attempts, for its partial
(which the page includes and which also polls on its own)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from dashboard.attempts import Attempt, Clock, attempts_of, clock_of

register = template.Library()


@dataclass(frozen=True)
class Progress:
    now: datetime
    clock: Clock
    attempts: list[Attempt]
    ends_at: datetime | None


@register.simple_tag
def progress_of(job: Any, events: list[Any]) -> Progress:
    """`events`: the job's timeline in (at, id) order, as its view already read it for the
    page's timeline, so that a job with many attempts costs no second read of its events."""
    now = timezone.now()
    clock = clock_of(job, now)
    attempts = attempts_of(events, job.placement)
    return Progress(now, clock, attempts, clock.ends_at(now) if not job.is_final else None)
