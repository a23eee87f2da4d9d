"""The job page's runtime prediction and estimated start band (templates/dashboard/partials/
_job_forecast.html): what the API gives as `start_band` and `runtime_prediction`
(gpuqueue/services/forecasts/runtime_history.py reads both from the last forecast), worded as the
CLI words them (gpuqueue/client/forecast_text.py)."""

from __future__ import annotations

from django import template
from django.utils import timezone

from gpuqueue.client import forecast_text
from gpuqueue.models import Job
from gpuqueue.services.forecasts.runtime_history import runtime_prediction_of, start_band_of

register = template.Library()


@register.filter
def start_band(job: Job) -> str:
    """The band or why there is none, while PENDING; '' otherwise or before any forecast."""
    return forecast_text.band_text(start_band_of(job), timezone.now())


@register.filter
def estimate_moves(job: Job) -> str:
    """'Estimate moved later 3 times; last: …', while PENDING; '' when it never moved later."""
    band = start_band_of(job)
    return (band or {}).get("moved_later_text") or ""


@register.filter
def runtime_prediction(job: Job) -> str:
    """The runtime the last forecast used and where it came from, until the job finishes."""
    return forecast_text.runtime_text(runtime_prediction_of(job))
