"""`array_summary` on the job list's rows that stand for an array (gpuqueue/services/jobs/
array_rows.py): the list view computes the page's summaries once and hangs each on its row
(`attach`), as the job serializer's fields read no context (gpuqueue/api/cached_fields.py);
elsewhere (a job read alone, `?expand=tasks`) the field is null."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpuqueue.core.array_schedule import throttle_sentence
from gpuqueue.models import Job
from gpuqueue.services.jobs.array_rows import ArraySummary


class ArraySummarySerializer(serializers.Serializer):
    array = serializers.IntegerField(help_text="the array's id (/api/v1/arrays/{id}/)")
    label = serializers.CharField(
        help_text="squeue's: 123_[10-99%10], the waiting tasks' indices and the limit"
    )
    name = serializers.CharField()
    spec = serializers.CharField()
    size = serializers.IntegerField()
    max_concurrent = serializers.IntegerField(allow_null=True)
    state = serializers.CharField(
        help_text="RUNNING while a task holds GPUs, else PENDING while one waits, else how "
        "the tasks ended (FAILED or CANCELLED if any did, else SUCCEEDED)"
    )
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="tasks per state")
    next_start = serializers.DateTimeField(
        allow_null=True, help_text="the earliest estimated start of a waiting task"
    )
    estimated_finish = serializers.DateTimeField(
        allow_null=True,
        help_text="when the last task should end: null unless every unfinished task "
        "declares an expected runtime and every start is known",
    )
    next_held = serializers.CharField(
        allow_null=True,
        help_text="for the first task held by the limit: when it starts, as a sentence",
    )


def summary_data(summary: ArraySummary) -> dict[str, Any]:
    array, seen = summary.array, summary.outlook
    held = [o for o in seen.tasks.values() if o.index in summary.held_indices]
    first = min(held, key=lambda o: o.index) if held else None
    return {
        "array": array.pk,
        "label": summary.label,
        "name": array.name,
        "spec": array.spec,
        "size": array.size,
        "max_concurrent": array.max_concurrent,
        "state": summary.state,
        "counts": summary.counts,
        "next_start": seen.next_start,
        "estimated_finish": seen.finish,
        "next_held": None
        if first is None or array.max_concurrent is None
        else throttle_sentence(first.index, array.size, array.max_concurrent, first.after),
    }


@extend_schema_field(ArraySummarySerializer(allow_null=True))
class ArraySummaryField(serializers.Field):
    """The array this list row stands for; null on other rows and outside the list."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, job: Job) -> dict[str, Any] | None:
        summary = getattr(job, SUMMARY_ATTRIBUTE, None)
        if summary is None:
            return None
        return ArraySummarySerializer(summary_data(summary)).data


SUMMARY_ATTRIBUTE = "_array_summary"


def attach(jobs: list[Job], summaries: dict[int, ArraySummary]) -> None:
    """Hang each array's summary on the row that stands for it."""
    for job in jobs:
        if job.array_id in summaries:
            setattr(job, SUMMARY_ATTRIBUTE, summaries[job.array_id])
