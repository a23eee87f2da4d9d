"""Build the engine's Snapshot and Policy from the database, in a handful of queries."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.conf import settings
from django.db import connection

from gpuqueue.core import pod_sets
from gpuqueue.core.states import HOLDING, JobState
from gpuqueue.cycle.job_feed import Row, StoredPending, read_active
from gpuqueue.cycle.table_versions import kept_while_tables_unchanged
from gpuqueue.models import Flavor, Job, JobActivity, Node, Quota
from gpuqueue.scheduler import model as m
from gpuqueue.services.cluster.inventory import node_capacity_by_flavor
from gpuqueue.services.jobs.pod_spec import worker_requests
from teams.models import Team


def policy_from_settings() -> m.Policy:
    return m.Policy(
        placement=m.PlacementStrategy(settings.GPUQUEUE_PLACEMENT),
        starvation_seconds=settings.GPUQUEUE_STARVATION_SECONDS,
        backfill_prediction_factor=settings.GPUQUEUE_BACKFILL_PREDICTION_FACTOR,
        min_runtime_seconds=settings.GPUQUEUE_MIN_RUNTIME_SECONDS,
        preemption=settings.GPUQUEUE_PREEMPTION,
        reclaim=settings.GPUQUEUE_RECLAIM,
        reclaim_min_runtime_seconds=settings.GPUQUEUE_RECLAIM_MIN_RUNTIME_SECONDS,
        time_based_share=settings.GPUQUEUE_TIME_BASED_SHARE,
    )


def load_nodes(flavors: list[Flavor] | None = None) -> tuple[m.Node, ...]:
    """Every node with its GPUs per flavor (two queries: flavors unless given, nodes). A
    shared flavor's resource counts slices: slices held elsewhere take the whole GPUs they fill,
    rounded up (`Flavor.gpus_held_by`)."""
    flavors = list(Flavor.objects.all()) if flavors is None else flavors
    by_resource = {f.name: f.resource_name for f in flavors}
    by_name = {f.name: f for f in flavors}
    # The labels of the flavors' topology levels, all a node's labels the engine reads.
    levels = {key for f in flavors for key in f.topology_levels or ()}
    nodes = []
    for node in Node.objects.order_by("name"):
        capacity = node_capacity_by_flavor(
            node.capacity, node.labels, flavors, taints=node.taints, devices=node.devices
        )
        external = {
            name: by_name[name].gpus_held_by(
                int(node.used_externally.get(by_resource[name], 0) or 0)
            )
            for name in capacity
        }
        nodes.append(
            m.Node(
                name=node.name,
                capacity=capacity,
                used_externally={k: v for k, v in external.items() if v},
                schedulable=node.schedulable,
                draining=stored_draining(node.draining, capacity, by_name),
                cpu=node.allocatable_cpu_millicores,
                memory=node.allocatable_memory_bytes,
                pods=node.allocatable_pods,
                cpu_used_externally=node.external_cpu_millicores,
                memory_used_externally=node.external_memory_bytes,
                pods_used_externally=node.external_pods,
                model=node.gpu_model or None,
                labels={k: str(v) for k, v in node.labels.items() if k in levels},
            )
        )
    return tuple(nodes)


def stored_draining(
    stored: Mapping[str, Mapping[str, int]],
    capacity: Mapping[str, int],
    flavors: Mapping[str, Flavor],
) -> tuple[m.Draining, ...]:
    """The GPUs a node row says gpuqueue's terminating pods hold ({job id: {resource: GPUs}},
    as the inventory counted them), for each flavor the node offers; claimed by no job yet
    (`claimed_by`)."""
    draining = []
    for job, by_name in sorted((stored or {}).items(), key=lambda item: int(item[0])):
        for flavor in sorted(capacity):
            held = int((by_name or {}).get(flavors[flavor].resource_name, 0) or 0)
            gpus = flavors[flavor].gpus_held_by(held)
            if gpus > 0:
                draining.append(m.Draining(flavor, gpus, int(job)))
    return tuple(draining)


def load_teams(teams: list[Team] | None = None) -> tuple[m.Team, ...]:
    """Every team (read here unless given) with its quotas per flavor and its department."""
    quotas: dict[int, dict[str, m.Quota]] = {}
    for quota in Quota.objects.select_related("flavor"):
        quotas.setdefault(quota.team_id, {})[quota.flavor.name] = m.Quota(
            guarantee=quota.guarantee, limit=quota.limit, weight=quota.weight
        )
    if teams is None:
        teams = list(Team.objects.select_related("parent").order_by("slug"))
    return tuple(
        m.Team(id=t.slug, quotas=quotas.get(t.pk, {}), parent=t.parent.slug if t.parent else None)
        for t in teams
    )


@dataclass(frozen=True)
class Names:
    """What the job rows name by id: team slugs and flavors' (name, idle policy); and the
    flavors themselves, for the CPU and memory a worker asks when its job sets none; and the
    flavors whose GPUs may be shared."""

    teams: dict[int, str]
    flavors: dict[int, tuple[str, str]]
    per_gpu: dict[int, tuple[int, int]] = field(default_factory=dict)  # CPU, memory MiB
    shared: frozenset[str] = frozenset()
    topologies: dict[str, tuple[str, ...]] = field(default_factory=dict)  # flavor -> levels
    team_gpu: frozenset[str] = frozenset()  # shared DRA flavors: one team per GPU


def _load_world() -> tuple[tuple[m.Node, ...], tuple[m.Team, ...], Names]:
    """Nodes, teams with quotas, and the names job rows refer to, flavors and teams read once."""
    flavors = list(Flavor.objects.all())
    teams = list(Team.objects.select_related("parent").order_by("slug"))
    names = Names(
        {t.pk: t.slug for t in teams},
        {f.pk: (f.name, f.idle_policy) for f in flavors},
        {f.pk: (f.cpu_millicores_per_gpu, f.memory_mib_per_gpu) for f in flavors},
        frozenset(f.name for f in flavors if f.shareable),
        {f.name: tuple(f.topology_levels) for f in flavors if f.topology_levels},
        frozenset(f.name for f in flavors if f.shareable and f.device_class),
    )
    return load_nodes(flavors), load_teams(teams), names


def load_snapshot(now: datetime, stored: dict[int, StoredPending] | None = None) -> m.Snapshot:
    """Nodes, teams with quotas, and active jobs: the nodes and teams as last read while their
    tables are unchanged (cycle/table_versions.py), the jobs from the change feed
    (cycle/job_feed.py). Pending jobs backing off after failed starts (`not_before` after
    `now`) or held back by the hold phase (gpuqueue/services/jobs/holds.py: dependencies, an
    array's %K) are left out. With `stored`, also fills it with what each pending job shows
    now, so that the cycle writes only what changed without reading the queue again."""
    nodes, snapshot_teams, names = kept_while_tables_unchanged("snapshot world", _load_world)
    active = read_active()
    min_runtime = settings.GPUQUEUE_MIN_RUNTIME_SECONDS
    if active.names != (names, min_runtime):  # a team or flavor renamed, a setting changed:
        active.objects.clear()  # every job's object made anew
        active.names = (names, min_runtime)
    idle_first = _idle_reclaim_first(names)
    due = now.timestamp()
    objects = active.objects
    running: list[m.RunningJob] = []
    pending: list[m.PendingJob] = []
    waiting = JobState.PENDING.value  # read once: an enum member's value is a descriptor call
    for job_id in sorted(active.rows):
        row = active.rows[job_id]
        job = objects.get(job_id)
        if row.state == waiting:
            if row.hold or (row.not_before is not None and row.not_before > due):
                continue
            if job is None:
                job = objects[job_id] = _pending(row, names)
            pending.append(job)
        else:
            if job is None:
                job = objects[job_id] = _running(row, names, min_runtime)
            if job_id in idle_first:
                job = replace(job, idle_reclaim_first=True)
            running.append(job)
    if stored is not None:
        shown = active.shown
        stored.update((job.id, shown[job.id]) for job in pending)
    nodes = claimed_by(nodes, _awaited_victims(active.shown, active.awaiting, active.rows))
    return m.Snapshot(
        now=now.timestamp(),
        nodes=nodes,
        teams=snapshot_teams,
        running=tuple(running),
        pending=tuple(pending),
        shared_flavors=names.shared,
        team_gpu_flavors=names.team_gpu,
        topologies=names.topologies,
    )


def _awaited_victims(
    shown: Mapping[int, StoredPending], awaiting: Iterable[int], rows: Mapping[int, Row]
) -> dict[int, int]:
    """Jobs that pending jobs wait on (`awaiting`: their reason as the last cycle wrote it is
    WAITING_FOR_PREEMPTION) and that hold no GPUs any more: victim -> the waiting job (the
    smallest id)."""
    awaited: dict[int, int] = {}
    waiting = JobState.PENDING.value
    for job_id in awaiting:
        reason = shown[job_id][0]
        for victim in reason.get("job_ids") or ():
            row = rows.get(victim)
            if row is not None and row.state != waiting:
                continue  # still holds its GPUs: the engine sees it running
            if victim not in awaited or job_id < awaited[victim]:
                awaited[victim] = job_id
    return awaited


def claimed_by(nodes: tuple[m.Node, ...], awaited: Mapping[int, int]) -> tuple[m.Node, ...]:
    """The nodes with the GPUs of awaited victims' terminating pods claimed by the job waiting
    on them: they come back to it, so it waits for them instead of preempting another job."""
    if not awaited:
        return nodes
    result = []
    for node in nodes:
        if any(d.job_id in awaited for d in node.draining):
            draining = tuple(
                replace(d, for_job_id=awaited[d.job_id]) if d.job_id in awaited else d
                for d in node.draining
            )
            node = replace(node, draining=draining)
        result.append(node)
    return tuple(result)


def _idle_reclaim_first(names: Names) -> set[int]:
    """Jobs holding GPUs whose current attempt is flagged idle, on a flavor whose policy
    reclaims idle borrowers first (gpuqueue/services/accounting/gpu_activity.py; the engine's
    preemption rule 1b): asked each cycle, as activity is not part of the job's row."""
    flavors = [pk for pk, (_, policy) in names.flavors.items() if policy == "reclaim_first"]
    if not flavors:
        return set()
    quote = connection.ops.quote_name
    job = quote(Job._meta.db_table)
    activity = quote(JobActivity._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT j.id FROM {job} j WHERE j.state = ANY(%s) AND j.flavor_id = ANY(%s) "
            f"AND EXISTS (SELECT 1 FROM {activity} a WHERE a.job_id = j.id "
            "AND a.attempt = j.attempts AND a.idle)",
            [sorted(HOLDING), flavors],
        )
        return {job_id for (job_id,) in cursor.fetchall()}


def _running(row: Row, names: Names, min_runtime: float) -> m.RunningJob:
    placement = json.loads(row.placement) if row.placement else {}
    started = row.admitted_at if row.admitted_at is not None else row.submitted_at
    cpu, memory = _requests(row, names)
    rooms: tuple[tuple[str, int, int, int], ...] = ()
    if row.pod_sets and row.pod_nodes:  # its units, and what its pods take on each node
        rooms = pod_sets.rooms(json.loads(row.pod_nodes), json.loads(row.pod_sets))
    return m.RunningJob(
        id=row.id,
        team=names.teams[row.team_id],
        user=str(row.user_id),
        flavor=names.flavors[row.flavor_id][0],
        gpus_per_worker=row.gpus_per_worker,
        placement=tuple(sorted((str(k), int(v)) for k, v in placement.items())),
        priority=row.priority,
        preemptible=row.preemptible,
        started_at=started,
        max_runtime=row.max_runtime_seconds,
        expected_runtime=row.expected_runtime_seconds,
        min_runtime_until=started + min_runtime,
        preempting_since=(
            row.checkpoint_requested_at if row.state == JobState.PREEMPTING else None
        ),
        preempted_for=row.preempted_for if row.state == JobState.PREEMPTING else None,
        checkpoint_grace=row.checkpoint_grace_seconds,
        idle_reclaim_first=False,
        cpu_per_worker=cpu,
        memory_per_worker=memory,
        gpu_milli=row.gpu_milli,
        devices=_devices(row.gpu_devices),
        rooms=rooms,
    )


def _devices(stored: str | None) -> tuple[tuple[str, int], ...]:
    """The stored [[node, GPU index], ...] of a fractional job, as the engine takes them."""
    return tuple(sorted((str(node), int(index)) for node, index in json.loads(stored or "[]")))


def _requests(row: Row, names: Names) -> tuple[int, int]:
    """A worker's CPU (millicores) and memory (bytes), as its pod asks them."""
    cpu, memory_mib = worker_requests(
        row.cpu_millicores, row.memory_mib, row.gpus_per_worker, names.per_gpu[row.flavor_id]
    )
    return cpu, memory_mib << 20


def _pending(row: Row, names: Names) -> m.PendingJob:
    cpu, memory = _requests(row, names)
    workers, gpus_per_worker = row.workers, row.gpus_per_worker
    pods: tuple[m.PodAsk, ...] = ()
    if row.pod_sets:  # its pods, each planned with its own ask (PendingJob.pods)
        pods = pod_sets.asks(json.loads(row.pod_sets))
        workers = len(pods)
        gpus_per_worker, cpu, memory = (max(ask[k] for ask in pods) for k in range(3))
    return m.PendingJob(
        id=row.id,
        team=names.teams[row.team_id],
        user=str(row.user_id),
        flavor=names.flavors[row.flavor_id][0],
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        priority=row.priority,
        preemptible=row.preemptible,
        submitted_at=row.submitted_at,
        max_runtime=row.max_runtime_seconds,
        expected_runtime=row.expected_runtime_seconds,
        cpu_per_worker=cpu,
        memory_per_worker=memory,
        gpu_milli=row.gpu_milli,
        gpu_models=tuple(row.gpu_models or ()),
        topology_level=row.topology_level,
        topology_required=row.topology_required,
        requeued_at=row.requeued_at,
        pods=pods,
    )
