"""A job's GPU activity in its representation: utilization and, once flagged, why it is idle
in words (services/accounting/gpu_activity.py)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.accounting.gpu_activity import IdleFinding, findings_for

CONTEXT_KEY = "gpu_activity_findings"


@extend_schema_field(serializers.JSONField(allow_null=True))
class GpuActivityField(serializers.Field):
    """While RUNNING or PREEMPTING and where utilization is known: {gpu_utilization (percent,
    mean over its GPUs), measured_at, below_since (since when below its flavor's idle
    threshold, or null), idle (flagged), message ("its 8 GPUs have been below 5 % utilization
    for 47 min")}; else null."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, job: Job) -> dict[str, Any] | None:
        if job.state not in (JobState.RUNNING, JobState.PREEMPTING):
            return None  # no query for the jobs that hold no GPUs
        finding = self._finding(job)
        if finding is None:
            return None
        return {
            "gpu_utilization": round(finding.gpu_utilization, 1),
            "measured_at": finding.measured_at.isoformat(),
            "below_since": finding.below_since.isoformat() if finding.below_since else None,
            "idle": finding.idle,
            "message": finding.message,
        }

    def _finding(self, job: Job) -> IdleFinding | None:
        """Read once for every job of the list being written (one query per page, not one
        per job), kept in the serializer's context."""
        known: dict[int, IdleFinding | None] = self.context.setdefault(CONTEXT_KEY, {})
        if job.pk not in known:
            jobs = [job]
            if isinstance(self.root, serializers.ListSerializer) and self.parent is self.root.child:
                jobs += [j for j in self.root.instance if j.pk not in known]
            found = findings_for(jobs)
            known.update({j.pk: found.get(j.pk) for j in jobs})
        return known[job.pk]
