"""Utilization samples, taken every minute by `gpuqueue.sample_utilization`, and "idle iron".

Idle iron, precisely: for one flavor and one minute,

    free        = GPUs of the flavor on schedulable nodes (ready, not cordoned, not drained)
                  that neither gpuqueue's admitted/running/preempting jobs nor pods outside
                  gpuqueue hold;
    waiting_fit = GPUs asked for by the flavor's PENDING jobs that
                  (a) the engine has already judged and held back for a reason other than
                      capacity (any reason but no_capacity, waiting_for_reclaim,
                      never_fits, reserved and backing_off, so a queue limit, fair share, a
                      reservation, the team's own queue, waiting for preemptions or a missing
                      quota), and
                  (b) whose whole gang fits on the free GPUs right now, node by node;
    idle iron   = min(free, waiting_fit) GPU-minutes.

Over a window it is the sum over the minutes sampled, in GPU-hours: GPUs that sat free while
work that would have fitted on them waited. Minutes without a sample (the service was down)
count nothing. Jobs that no cycle has judged yet (no reason) are left out, so the seconds
between a submission and the next cycle do not count as idle iron.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from gpuqueue.core.reason_text import BACKING_OFF
from gpuqueue.core.states import HOLDING, JobState
from gpuqueue.models import Flavor, Job, Node, UtilizationSample
from gpuqueue.services.cluster.inventory import node_capacity_by_flavor, usage_now
from teams.models import Team

SAMPLE_MINUTES = 1
# Samples older than this are deleted by the sampling task: the longest window shown is a week.
RETENTION = timedelta(days=8)
# Pending reasons that mean "no room for the gang": such a job did not wait on free GPUs. A job
# backing off after failed starts waits on the cluster, not on gpuqueue's policy: no idle iron.
CAPACITY_REASONS = frozenset(
    {"no_capacity", "waiting_for_reclaim", "never_fits", "reserved", BACKING_OFF}
)


@dataclass(frozen=True, slots=True)
class PendingShape:
    workers: int
    gpus_per_worker: int
    reason_code: str | None

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker


def gang_fits(free_by_node: Mapping[str, int], workers: int, gpus_per_worker: int) -> bool:
    """Whether `workers` workers of `gpus_per_worker` GPUs each fit on the free GPUs, each
    worker whole on one node (the engine's own rule)."""
    if gpus_per_worker <= 0:
        return False
    return sum(free // gpus_per_worker for free in free_by_node.values()) >= workers


def waiting_fit_gpus(free_by_node: Mapping[str, int], pending: Iterable[PendingShape]) -> int:
    """GPUs of pending jobs held back for a policy reason although their gang fits now."""
    return sum(
        job.gpus
        for job in pending
        if job.reason_code is not None
        and job.reason_code not in CAPACITY_REASONS
        and gang_fits(free_by_node, job.workers, job.gpus_per_worker)
    )


def idle_gpu_minutes(free: int, waiting_fit: int) -> int:
    return max(0, min(free, waiting_fit))


def idle_gpu_hours(minutes: Iterable[tuple[int, int]]) -> float:
    """Idle iron over sampled minutes given as (free, waiting_fit) pairs, in GPU-hours."""
    return sum(idle_gpu_minutes(free, fit) for free, fit in minutes) * SAMPLE_MINUTES / 60


def free_by_flavor_and_node(
    nodes: Iterable[Node], flavors: list[Flavor], holding: Iterable[tuple[str, int, dict[str, int]]]
) -> dict[str, dict[str, int]]:
    """{flavor: {node: free GPUs}} on schedulable nodes; `holding` is (flavor, thousandths of
    a GPU per worker, placement) of every job that holds GPUs (`per_worker_milli`): its
    workers on a node take the GPUs their thousandths add up to, rounded up."""
    free: dict[str, dict[str, int]] = defaultdict(dict)
    by_name = {f.name: f for f in flavors}
    for node in nodes:
        if not node.schedulable:
            continue
        for flavor, gpus in node_capacity_by_flavor(
            node.capacity, node.labels, flavors, taints=node.taints, devices=node.devices
        ).items():
            resource = by_name[flavor].resource_name
            # Terminating pods' GPUs are not idle: they are held until the pods are gone.
            held = int(node.used_externally.get(resource, 0) or 0) + node.draining_gpus(resource)
            free[flavor][node.name] = max(gpus - by_name[flavor].gpus_held_by(held), 0)
    for flavor, milli_per_worker, placement in holding:
        on_flavor = free.get(flavor)
        if on_flavor is None:
            continue
        for node, workers in placement.items():
            if node in on_flavor:
                taken = -(-int(workers) * milli_per_worker // 1000)
                on_flavor[node] = max(on_flavor[node] - taken, 0)
    return free


def per_worker_milli(gpus_per_worker: int, gpu_milli: int) -> int:
    """A worker's GPUs in thousandths: its fraction of one, or its whole GPUs."""
    return gpu_milli or gpus_per_worker * 1000


def sample_utilization(now: datetime | None = None) -> int:
    """Store one minute's samples; returns how many rows were written (0 if that minute was
    already sampled, so a duplicate beat delivery writes nothing).

    1. Truncate `now` to the minute; stop if that minute has samples.
    2. Per flavor and team: capacity (ready nodes), allocated (held by admitted, running and
       preempting jobs) and pending GPUs; team NULL is the whole cluster.
    3. Per flavor: free GPUs node by node and the GPUs of pending jobs that would have fitted
       (the module docstring), kept on the flavor's cluster row, for idle iron.
    4. Write all rows in one transaction and drop samples older than RETENTION.
    """
    at = (now or timezone.now()).replace(second=0, microsecond=0)
    if UtilizationSample.objects.filter(at=at).exists():
        return 0
    flavors = list(Flavor.objects.all())
    flavor_ids = {f.name: f.pk for f in flavors}
    team_ids = dict(Team.objects.values_list("slug", "id"))
    rows: list[UtilizationSample] = []
    cluster_rows: dict[str, UtilizationSample] = {}
    for usage in usage_now():
        flavor_id = flavor_ids[usage.flavor]
        cluster_rows[usage.flavor] = UtilizationSample(
            at=at,
            flavor_id=flavor_id,
            team=None,
            capacity=usage.capacity,
            # Samples keep whole GPUs: a GPU partly held counts as held.
            allocated=math.ceil(usage.allocated),
            pending=math.ceil(usage.pending_gpus),
        )
        rows.append(cluster_rows[usage.flavor])
        for team in usage.teams:
            if team.allocated or team.pending_gpus or team.guarantee is not None:
                # A team row's capacity is the flavor's: stacked, the teams' allocations add
                # up to the cluster row's.
                rows.append(
                    UtilizationSample(
                        at=at,
                        flavor_id=flavor_id,
                        team_id=team_ids[team.team],
                        capacity=usage.capacity,
                        allocated=math.ceil(team.allocated),
                        pending=math.ceil(team.pending_gpus),
                    )
                )
    holding = [
        (flavor, per_worker_milli(gpw, milli), placement or {})
        for flavor, gpw, milli, placement in Job.objects.filter(state__in=HOLDING).values_list(
            "flavor__name", "gpus_per_worker", "gpu_milli", "placement"
        )
    ]
    free = free_by_flavor_and_node(Node.objects.all(), flavors, holding)
    pending: dict[str, list[PendingShape]] = defaultdict(list)
    for flavor, workers, gpw, reason in Job.objects.filter(state=JobState.PENDING).values_list(
        "flavor__name", "workers", "gpus_per_worker", "standing__reason"
    ):
        code = reason.get("code") if isinstance(reason, dict) else None
        pending[flavor].append(PendingShape(workers, gpw, code))
    for name, row in cluster_rows.items():
        row.free = sum(free.get(name, {}).values())
        row.waiting_fit = waiting_fit_gpus(free.get(name, {}), pending.get(name, []))
    with transaction.atomic():
        UtilizationSample.objects.bulk_create(rows)
        UtilizationSample.objects.filter(at__lt=at - RETENTION).delete()
    return len(rows)
