"""The job page's runtime prediction and estimated start band (templates/dashboard/partials/
_job_forecast.html), worded as the CLI words them (gpuqueue/client/forecast_text.py) from what
the last forecast stored on the job (gpuqueue/services/runtime_history.py)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from gpuqueue.client import forecast_text
from gpuqueue.core.states import FINAL, JobState
from gpuqueue.models import Job
from gpuqueue.services.runtime_history import why_none_text

register = template.Library()


def _forecast(job: Job) -> dict[str, Any] | None:
    return job.forecast if isinstance(job.forecast, dict) else None


@register.filter
def start_band(job: Job) -> str:
    """The band or why there is none, while PENDING; '' otherwise or before any forecast."""
    forecast = _forecast(job)
    if job.state != JobState.PENDING or forecast is None:
        return ""
    band = {**forecast, "why_none_text": why_none_text(forecast.get("why_none"))}
    return forecast_text.band_text(band, timezone.now())


@register.filter
def runtime_prediction(job: Job) -> str:
    """The runtime the last forecast used and where it came from, until the job finishes."""
    forecast = _forecast(job)
    if job.state in FINAL or forecast is None:
        return ""
    return forecast_text.runtime_text(forecast.get("runtime"))
