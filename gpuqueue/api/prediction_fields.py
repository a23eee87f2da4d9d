"""A job's runtime prediction and the band of its estimated start, as the API shows them
(gpuqueue/services/forecasts/runtime_history.py computes both)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpuqueue.models import Job
from gpuqueue.services.forecasts.runtime_history import runtime_prediction_of, start_band_of


@extend_schema_field(serializers.JSONField(allow_null=True))
class RuntimePredictionField(serializers.Field):
    """{p10, p50, p90 (seconds), source, samples} while the job has not finished, as the last
    forecast used it: `source` is "declared" (its expected runtime) or the level of history it
    came from (user_name, user_image, team_shape, flavor_shape, flavor); null when neither was
    known."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, job: Job) -> dict[str, Any] | None:
        return runtime_prediction_of(job)


@extend_schema_field(serializers.JSONField(allow_null=True))
class StartBandField(serializers.Field):
    """While PENDING: {early, late (ISO times, late null when beyond the forecast's horizon),
    why_none (a code when there is no estimate), why_none_text (that as a sentence),
    moved_later (how many times the estimated start moved later), moved_later_text (that and
    its last cause as a sentence, or null)}."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, job: Job) -> dict[str, Any] | None:
        return start_band_of(job)
