"""The query and the answer of GET /api/v1/jobs/{id}/logs/ (apart from serializers.py, which
describes the job itself)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from gpuqueue.api.fields import reject_unknown_fields
from gpuqueue.services.cluster.logs import DEFAULT_TAIL, MAX_TAIL, worker_errors


class LogQuerySerializer(serializers.Serializer):
    """?worker=N&tail=LINES&since_seconds=S; `context["job"]` bounds the worker."""

    worker = serializers.IntegerField(default=0, help_text="the worker (completion index)")
    tail = serializers.IntegerField(
        default=DEFAULT_TAIL, min_value=1, max_value=MAX_TAIL, help_text="the last lines only"
    )
    since_seconds = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=86400,
        help_text="only lines written this many seconds ago or later (for polling)",
    )

    def validate_worker(self, value: int) -> int:
        if errors := worker_errors(self.context["job"], value):
            raise serializers.ValidationError(errors)
        return value

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return super().to_internal_value(data)


class JobLogSerializer(serializers.Serializer):
    job = serializers.IntegerField(source="job_id")
    worker = serializers.IntegerField()
    attempt = serializers.IntegerField()
    lines = serializers.ListField(child=serializers.CharField(trim_whitespace=False))
    truncated = serializers.BooleanField(
        help_text="the byte limit (1 MiB) cut the answer short: ask for fewer lines"
    )
