"""The overview at `/`: per flavor the GPUs in use, free and asked for, with the free ones
split by why no waiting job takes them; the viewer's own jobs by state; the typical wait
now. Cluster figures are aggregates (every signed-in user reads them, as on Queues); the jobs
counted are the viewer's own."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Q

from gpuqueue.core.states import ACTIVE, FINAL, JobState
from gpuqueue.models import Job
from gpuqueue.services.accounting.idle_causes import IdleSplit, idle_split
from gpuqueue.services.cluster.inventory import usage_now

# The typical wait: the median over the jobs admitted this long before now.
WAIT_WINDOW = timedelta(hours=1)
# Finished jobs counted among "my jobs": those that ended this long before now.
RECENT = timedelta(hours=24)


@dataclass(frozen=True)
class FlavorNow:
    flavor: str
    capacity: int
    in_use: float
    asked: float  # GPUs of pending jobs
    pending_jobs: int
    idle: IdleSplit | None
    wait_seconds: float | None  # median wait of the jobs admitted in WAIT_WINDOW
    admitted: int  # how many that median is over

    @property
    def free(self) -> int:
        return self.idle.free if self.idle else 0


@dataclass(frozen=True)
class Overview:
    flavors: list[FlavorNow]
    mine: list[tuple[str, int]]  # (state, count), active states then recent final ones
    wait_seconds: float | None  # all flavors together
    admitted: int
    splits: list[IdleSplit] = field(default_factory=list)

    @property
    def any_free(self) -> bool:
        return any(f.free for f in self.flavors)


def my_jobs_by_state(user: Any, now: datetime) -> list[tuple[str, int]]:
    """The user's own jobs per state: every active one, and those that ended in RECENT."""
    rows = (
        Job.objects.filter(user=user)
        .filter(Q(state__in=ACTIVE) | Q(state__in=FINAL, finished_at__gte=now - RECENT))
        .values("state")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts = {r["state"]: r["n"] for r in rows}
    return [(s.value, counts.get(s.value, 0)) for s in JobState]


def recent_waits(now: datetime) -> dict[str, list[float]]:
    """Seconds from submission to admission of the jobs admitted in WAIT_WINDOW, per flavor."""
    waits: dict[str, list[float]] = {}
    for flavor, submitted, admitted in Job.objects.filter(
        admitted_at__gte=now - WAIT_WINDOW, admitted_at__lte=now
    ).values_list("flavor__name", "submitted_at", "admitted_at"):
        waits.setdefault(flavor, []).append(max((admitted - submitted).total_seconds(), 0.0))
    return waits


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def overview(user: Any, now: datetime) -> Overview:
    splits = {s.flavor: s for s in idle_split()}
    waits = recent_waits(now)
    flavors = [
        FlavorNow(
            flavor=u.flavor,
            capacity=u.capacity,
            in_use=u.allocated,
            asked=u.pending_gpus,
            pending_jobs=u.pending_jobs,
            idle=splits.get(u.flavor),
            wait_seconds=_median(waits.get(u.flavor, [])),
            admitted=len(waits.get(u.flavor, [])),
        )
        for u in sorted(usage_now(), key=lambda u: u.flavor)
    ]
    every = [w for ws in waits.values() for w in ws]
    return Overview(
        flavors=flavors,
        mine=[(s, n) for s, n in my_jobs_by_state(user, now) if n],
        wait_seconds=_median(every),
        admitted=len(every),
        splits=list(splits.values()),
    )


# Query parameters of the job list: a link to `/` that carries any of them is an old link to
# the list (which `/` was), and goes there.
JOB_LIST_PARAMS = frozenset({"team", "flavor", "state", "q", "mine", "page", "ordering", "expand"})


def is_job_list_link(params: Any) -> bool:
    return any(key in JOB_LIST_PARAMS for key in params)
