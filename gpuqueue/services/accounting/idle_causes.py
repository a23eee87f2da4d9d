"""Free GPUs now, per flavor, split by why no waiting job takes them: held back by its user's
own array limit, waiting for the jobs it depends on, kept out by its team's limit or share,
kept by the scheduler for a reservation or a preemption in progress, or truly idle (no
waiting job would fit on them). Reads only; the causes are those of idle iron
(gpuqueue/services/accounting/utilization.py), told apart.

A waiting job counts against a cause only when its whole gang fits on the free GPUs node by
node, as for idle iron; the causes take the free GPUs in the order below, none more than
what is left, and what no cause takes is truly idle."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count

from gpuqueue.core.reason_text import ARRAY_LIMIT, DEPENDENCIES, DEPENDENCY_UNMET
from gpuqueue.core.states import HOLDING, JobState
from gpuqueue.models import Flavor, Job, Node
from gpuqueue.services.accounting.utilization import (
    CAPACITY_REASONS,
    free_by_flavor_and_node,
    gang_fits,
    per_worker_milli,
)

# (cause, its words, the reason codes it stands for; None: every other non-capacity code).
CAUSES: tuple[tuple[str, str, frozenset[str] | None], ...] = (
    ("throttle", "held back by their users' own array limits (%K)", frozenset({ARRAY_LIMIT})),
    (
        "dependencies",
        "waiting for the jobs they depend on",
        frozenset({DEPENDENCIES, DEPENDENCY_UNMET}),
    ),
    (
        "limits",
        "kept out by their team's limit, quota or fair share",
        frozenset(
            {"over_limit", "no_quota", "over_fair_share", "in_share_debt", "queued_behind_team"}
        ),
    ),
    ("scheduler", "kept for a reservation or a preemption in progress", None),
)


@dataclass(frozen=True)
class IdleSplit:
    flavor: str
    free: int
    by_cause: dict[str, int]  # every cause, 0 for none

    @property
    def truly_idle(self) -> int:
        return self.free - sum(self.by_cause.values())

    @property
    def rows(self) -> list[tuple[str, str, int]]:
        """(cause, words, GPUs) for the causes that hold any."""
        return [(c, words, self.by_cause[c]) for c, words, _ in CAUSES if self.by_cause[c]]


def _cause_of(code: str | None) -> str | None:
    if code is None or code in CAPACITY_REASONS:
        return None
    for cause, _, codes in CAUSES:
        if codes is None or code in codes:
            return cause
    return None


def idle_split() -> list[IdleSplit]:
    """Per flavor, in name order: free GPUs now and the causes that keep waiting jobs off
    them (the module docstring)."""
    flavors = list(Flavor.objects.order_by("name"))
    holding = [
        (flavor, per_worker_milli(gpw, milli), placement or {})
        for flavor, gpw, milli, placement in Job.objects.filter(state__in=HOLDING).values_list(
            "flavor__name", "gpus_per_worker", "gpu_milli", "placement"
        )
    ]
    free = free_by_flavor_and_node(Node.objects.all(), flavors, holding)
    # Pending jobs by shape and reason code: a few rows however long the queue.
    wanted: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    rows = (
        Job.objects.filter(state=JobState.PENDING, gpu_milli=0)
        .values_list("flavor__name", "workers", "gpus_per_worker", "standing__reason__code")
        .annotate(n=Count("id"))
        .order_by()
    )
    for flavor, workers, gpw, code, n in rows:
        cause = _cause_of(code if isinstance(code, str) else None)
        if cause is not None and gang_fits(free.get(flavor, {}), workers, gpw):
            wanted[flavor][cause] += workers * gpw * n
    out = []
    for flavor in flavors:
        total = sum(free.get(flavor.name, {}).values())
        left, split = total, {}
        for cause, _, _ in CAUSES:
            split[cause] = min(left, wanted[flavor.name][cause])
            left -= split[cause]
        out.append(IdleSplit(flavor.name, total, split))
    return out
