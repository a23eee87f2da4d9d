"""Job lists with an array as one row: the list keeps, of each array's tasks that match its
filter, the first (lowest id, i.e. lowest index), and that row carries the array's summary:
its tasks counted by state, its limit, squeue's label, the next start and the finish
(gpuqueue/core/array_schedule.py). Reads only."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Exists, OuterRef, Q, QuerySet

from gpuqueue.core.array_schedule import ArrayOutlook, Task, outlook, slurm_label
from gpuqueue.core.states import FINAL, JobState
from gpuqueue.models import Job, JobArray, JobHold
from gpuqueue.services.jobs.arrays import counts_by_array


def one_row_per_array(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """`jobs` with each array's matching tasks reduced to the first of them (ordinary jobs
    unchanged), so that ordering and paging work on rows as before. A task is kept when no
    earlier task of its array matches the same filter: a probe of the (array, index) index
    per row, so a page sorted by an index still reads only its rows."""
    earlier = jobs.order_by().filter(array_id=OuterRef("array_id"), id__lt=OuterRef("id"))
    return jobs.filter(Q(array__isnull=True) | ~Exists(earlier))


@dataclass(frozen=True)
class ArraySummary:
    array: JobArray
    counts: dict[str, int]  # every state, 0 for none
    label: str  # squeue's: 123_[10-99%10]
    outlook: ArrayOutlook
    held_indices: frozenset[int] = frozenset()  # pending tasks held by the limit

    @property
    def limit(self) -> int | None:
        return self.array.max_concurrent

    @property
    def unfinished(self) -> int:
        return sum(n for state, n in self.counts.items() if state not in FINAL)

    @property
    def holding(self) -> int:
        return sum(self.counts[s] for s in ("ADMITTED", "RUNNING", "PREEMPTING"))

    @property
    def counts_text(self) -> str:
        """'3 running, 90 pending, 7 succeeded' (admitted and preempting count as running)."""
        parts = []
        if self.holding:
            parts.append(f"{self.holding} running")
        for state in ("PENDING", "SUCCEEDED", "FAILED", "CANCELLED"):
            if self.counts[state]:
                parts.append(f"{self.counts[state]} {state.lower()}")
        return ", ".join(parts) or "no tasks"

    @property
    def state(self) -> str:
        """The row's state: pending while a task waits and none runs, running while one runs,
        else how the tasks ended (failed if any failed)."""
        if self.holding:
            return JobState.RUNNING
        if self.counts[JobState.PENDING]:
            return JobState.PENDING
        for state in (JobState.FAILED, JobState.CANCELLED):
            if self.counts[state]:
                return state
        return JobState.SUCCEEDED


def array_summaries(array_ids: Collection[int], now: datetime) -> dict[int, ArraySummary]:
    """Each array's summary, in three queries however many arrays (a page of rows)."""
    ids = sorted(set(array_ids))
    if not ids:
        return {}
    arrays = JobArray.objects.in_bulk(ids)
    counts = counts_by_array(ids)
    tasks: dict[int, list[Task]] = {i: [] for i in ids}
    rows = (
        Job.objects.filter(array__in=ids)
        .exclude(state__in=FINAL)
        .order_by()
        .values_list(
            "array_id",
            "array_index",
            "state",
            "hold",
            "started_at",
            "admitted_at",
            "estimated_start",
            "expected_runtime_seconds",
        )
    )
    for array_id, index, state, hold, started, admitted, eta, runtime in rows:
        tasks[array_id].append(
            Task(
                index=index,
                state=state,
                held=hold == JobHold.ARRAY_LIMIT,
                started=started or admitted,
                estimated_start=eta,
                runtime_seconds=runtime,
            )
        )
    out = {}
    for array_id, array in arrays.items():
        mine = tasks[array_id]
        pending = [t.index for t in mine if t.state == JobState.PENDING]
        out[array_id] = ArraySummary(
            array=array,
            counts=counts[array_id],
            label=slurm_label(array_id, array.spec, pending, array.max_concurrent),
            outlook=outlook(mine, array.max_concurrent, now),
            held_indices=frozenset(t.index for t in mine if t.held),
        )
    return out
