"""Build the engine's Snapshot and Policy from the database, in a handful of queries."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection

from gpuqueue.core import caches
from gpuqueue.core.states import HOLDING, JobState
from gpuqueue.models import Flavor, Job, JobActivity, Node, Quota
from gpuqueue.scheduler import model as m
from teams.models import Team


def policy_from_settings() -> m.Policy:
    return m.Policy(
        placement=m.PlacementStrategy(settings.GPUQUEUE_PLACEMENT),
        starvation_seconds=settings.GPUQUEUE_STARVATION_SECONDS,
        min_runtime_seconds=settings.GPUQUEUE_MIN_RUNTIME_SECONDS,
        preemption=settings.GPUQUEUE_PREEMPTION,
        reclaim=settings.GPUQUEUE_RECLAIM,
        time_based_share=settings.GPUQUEUE_TIME_BASED_SHARE,
    )


def node_capacity_by_flavor(
    node_capacity: dict[str, int],
    labels: dict[str, str],
    flavors: list[Flavor],
    *,
    taints: Iterable[Mapping[str, str]],
) -> dict[str, int]:
    """A node offers a flavor when it carries the flavor's labels, has its resource and every
    taint that would keep pods off it is tolerated by the flavor's pods (`Flavor.tolerates`)."""
    node_taints = list(taints)  # read once for every flavor
    offered = {}
    for flavor in flavors:
        count = int(node_capacity.get(flavor.resource_name, 0))
        if count > 0 and flavor.matches(labels) and flavor.tolerates(node_taints):
            offered[flavor.name] = count
    return offered


def load_nodes() -> tuple[m.Node, ...]:
    """Every node with its GPUs per flavor (two queries: flavors, nodes)."""
    flavors = list(Flavor.objects.all())
    by_resource = {f.name: f.resource_name for f in flavors}
    nodes = []
    for node in Node.objects.order_by("name"):
        capacity = node_capacity_by_flavor(node.capacity, node.labels, flavors, taints=node.taints)
        external = {
            name: int(node.used_externally.get(by_resource[name], 0) or 0) for name in capacity
        }
        nodes.append(
            m.Node(
                name=node.name,
                capacity=capacity,
                used_externally={k: v for k, v in external.items() if v},
                schedulable=node.schedulable,
            )
        )
    return tuple(nodes)


def load_teams() -> tuple[m.Team, ...]:
    """Every team with its quotas per flavor and its department (two queries)."""
    quotas: dict[int, dict[str, m.Quota]] = {}
    for quota in Quota.objects.select_related("flavor"):
        quotas.setdefault(quota.team_id, {})[quota.flavor.name] = m.Quota(
            guarantee=quota.guarantee, limit=quota.limit, weight=quota.weight
        )
    teams = Team.objects.select_related("parent").order_by("slug")
    return tuple(
        m.Team(id=t.slug, quotas=quotas.get(t.pk, {}), parent=t.parent.slug if t.parent else None)
        for t in teams
    )


# What the cycle last wrote on a pending job: (pending_reason, queue_position, cluster_position).
StoredPending = tuple[Any, int | None, int | None]


def load_snapshot(now: datetime, stored: dict[int, StoredPending] | None = None) -> m.Snapshot:
    """Nodes, teams with quotas, and active jobs, in a handful of queries; pending jobs are
    read whole only when new or changed (`PendingRows`), and those backing off after failed
    starts (`not_before` after `now`) are left out. With `stored`, also fills it with
    what each pending job shows now, so that the cycle writes only what changed without
    reading the queue a second time.

    The jobs are read through a cursor: with thousands pending, the ORM's per-row conversions
    (timestamps, a JSON placement that pending jobs never have) were most of a cycle. Times
    arrive as epoch seconds, which is what the engine takes, and a pending reason's JSON text
    is decoded once however many jobs share it."""
    nodes = load_nodes()
    snapshot_teams = load_teams()
    min_runtime = settings.GPUQUEUE_MIN_RUNTIME_SECONDS
    with connection.cursor() as cursor:
        cursor.execute(_running_sql(), [JobState.PREEMPTING.value, sorted(HOLDING)])
        running = [_running(row, min_runtime) for row in cursor.fetchall()]
        read = _PENDING_ROWS.read(cursor, now)
    pending = [job for job, _ in read]
    if stored is not None:
        stored.update((job.id, shown) for job, shown in read)
    return m.Snapshot(
        now=now.timestamp(),
        nodes=nodes,
        teams=snapshot_teams,
        running=tuple(running),
        pending=tuple(pending),
    )


def _sql_names() -> tuple[Any, str, str, str]:
    quote = connection.ops.quote_name
    return (
        quote,
        f"{quote(Job._meta.db_table)} {quote('j')}",
        f"JOIN {quote(Team._meta.db_table)} {quote('t')} ON {quote('t')}.{quote('id')} = "
        f"{quote('j')}.{quote(Job._meta.get_field('team').column)}",
        f"JOIN {quote(Flavor._meta.db_table)} {quote('f')} ON {quote('f')}.{quote('id')} = "
        f"{quote('j')}.{quote(Job._meta.get_field('flavor').column)}",
    )


def _epoch(quote: Any, column: str) -> str:
    return f"EXTRACT(EPOCH FROM {quote('j')}.{quote(column)})::float8"


def _idle_reclaim_first(quote: Any) -> str:
    """Whether the job's current attempt is flagged idle and its flavor's policy reclaims idle
    borrowers first (gpuqueue/services/gpu_activity.py; the engine's preemption rule 1b)."""
    a = f"{quote('a')}."
    return (
        f"({quote('f')}.{quote('idle_policy')} = 'reclaim_first' AND EXISTS (SELECT 1 FROM "
        f"{quote(JobActivity._meta.db_table)} {quote('a')} WHERE {a}{quote('job_id')} = "
        f"{quote('j')}.{quote('id')} AND {a}{quote('attempt')} = {quote('j')}.{quote('attempts')} "
        f"AND {a}{quote('idle')}))"
    )


@cache
def _running_sql() -> str:
    quote, jobs, teams, flavors = _sql_names()
    j = f"{quote('j')}."
    return (
        f"SELECT {j}{quote('id')}, {quote('t')}.{quote('slug')}, {j}{quote(_USER)}, "
        f"{quote('f')}.{quote('name')}, {j}{quote('gpus_per_worker')}, {j}{quote('placement')}, "
        f"{j}{quote('priority')}, {j}{quote('preemptible')}, "
        f"{_epoch(quote, 'submitted_at')}, {_epoch(quote, 'admitted_at')}, "
        f"{j}{quote('max_runtime_seconds')}, {j}{quote('expected_runtime_seconds')}, "
        f"CASE WHEN {j}{quote('state')} = %s THEN {_epoch(quote, 'checkpoint_requested_at')} END, "
        f"{_idle_reclaim_first(quote)} "
        f"FROM {jobs} {teams} {flavors} "
        f"WHERE {j}{quote('state')} = ANY(%s) ORDER BY {j}{quote('id')}"
    )


def _due(quote: Any) -> str:
    """The condition on a pending job that may be admitted at the time in its `%s`: one backing
    off after a failed start waits for its `not_before`, and one the hold phase holds back
    (gpuqueue/services/holds.py: dependencies, an array's %K) is not offered at all."""
    column = f"{quote('j')}.{quote('not_before')}"
    return f"({column} IS NULL OR {column} <= %s) AND {quote('j')}.{quote('hold')} = ''"


@cache
def _pending_sql(by_id: bool) -> str:
    """The pending jobs due at the last `%s` (`by_id`: with ids in the first), with what the
    cycle last wrote on them and their row version (in no order: `PendingRows` orders them by
    the versions' query). It repeats the versions' condition on `not_before`: a row that began
    backing off between the two reads is left out like one that is no longer pending."""
    quote, jobs, teams, flavors = _sql_names()
    j = f"{quote('j')}."
    return (
        f"SELECT {j}{quote('id')}, {quote('t')}.{quote('slug')}, {j}{quote(_USER)}, "
        f"{quote('f')}.{quote('name')}, {j}{quote('workers')}, {j}{quote('gpus_per_worker')}, "
        f"{j}{quote('priority')}, {j}{quote('preemptible')}, {_epoch(quote, 'submitted_at')}, "
        f"{j}{quote('max_runtime_seconds')}, {j}{quote('expected_runtime_seconds')}, "
        f"{j}{quote('pending_reason')}::text, {j}{quote('queue_position')}, "
        f"{j}{quote('cluster_position')}, {j}{quote('xmin')}::text "
        f"FROM {jobs} {teams} {flavors} "
        # The ids as rows to join (by the primary key), not `id = ANY(…)`: PostgreSQL may check
        # that filter row by row against the whole list.
        + (
            f"JOIN unnest(%s::bigint[]) AS {quote('s')}({quote('id')}) "
            f"ON {quote('s')}.{quote('id')} = {j}{quote('id')} "
            if by_id
            else ""
        )
        + f"WHERE {j}{quote('state')} = %s AND {_due(quote)}"
    )


@cache
def _pending_versions_sql() -> str:
    """Each pending job due at the second `%s` (`_due`), with its id and row version and the
    names the engine reads from joins."""
    quote, jobs, teams, flavors = _sql_names()
    j = f"{quote('j')}."
    return (
        f"SELECT {j}{quote('id')}, {j}{quote('xmin')}::text, {quote('t')}.{quote('slug')}, "
        f"{quote('f')}.{quote('name')} FROM {jobs} {teams} {flavors} "
        f"WHERE {j}{quote('state')} = %s AND {_due(quote)} ORDER BY {j}{quote('id')}"
    )


class PendingRows:
    """The pending jobs' rows, read whole only when they changed since the last read.

    At 8,500 pending jobs, reading and converting every row was most of a cycle over an idle
    queue (its snapshot 0.25 s against 0.02 s). PostgreSQL's `xmin` names the transaction that
    wrote a row's current version, so a row whose `xmin` (and team slug and flavor name, read
    through joins) is the one kept is the row kept: each row is kept under that version, by
    `gpuqueue.core.caches`' rule, and only new and changed rows are read whole.

    Rows are kept only from a transaction that has written nothing: a transaction that wrote
    a row could write it again with the same `xmin`, while a committed one cannot.
    """

    def __init__(self) -> None:
        # id -> the job and what the cycle last wrote on it
        # One entry per pending job, pruned to the jobs still pending at every read: no cap
        # (a cap below the queue's length would empty it on every cycle). A row's xmin is its
        # version; all are read again after ten minutes, as transaction ids wrap around.
        self._kept: caches.Kept[int, tuple[m.PendingJob, StoredPending]] = caches.Kept(
            max_entries=None, max_age_seconds=600.0
        )

    def read(self, cursor: Any, now: datetime) -> list[tuple[m.PendingJob, StoredPending]]:
        """Every pending job due at `now`, in id order, with what the cycle last wrote on it.
        (A job backing off is in no versions read, so it is not kept: it is read whole when
        its time comes.)"""
        cursor.execute(_pending_versions_sql(), [JobState.PENDING.value, now])
        versions = {row[0]: tuple(row[1:]) for row in cursor.fetchall()}  # id: (xmin, team, flavor)
        held = self._kept.get_many(versions)
        stale = [job_id for job_id, kept in held.items() if kept is None]
        fresh: dict[int, tuple[tuple[str, str, str], m.PendingJob, StoredPending]] = {}
        if stale:
            # Most rows stale (a cold start, a cycle that wrote every reason): all of them.
            by_id = len(stale) * 2 <= len(versions)
            wanted = set(stale)
            params = [*([stale] if by_id else []), JobState.PENDING.value, now]
            cursor.execute(_pending_sql(by_id), params)
            decoded: dict[str | None, Any] = {None: None}
            for row in cursor.fetchall():
                if row[0] not in wanted:
                    continue  # kept, and current
                job, reason, queue_position, cluster_position, xmin = _pending(row)
                if reason not in decoded:
                    decoded[reason] = json.loads(reason)
                shown = (decoded[reason], queue_position, cluster_position)
                fresh[job.id] = ((xmin, job.team, job.flavor), job, shown)
        cursor.execute("SELECT pg_current_xact_id_if_assigned() IS NULL")
        if cursor.fetchone()[0]:
            self._kept.put_many(
                {job_id: (version, (job, shown)) for job_id, (version, job, shown) in fresh.items()}
            )
            self._kept.keep_only(versions)
        read = []
        for job_id in versions:
            kept = held[job_id] or (fresh[job_id][1:] if job_id in fresh else None)
            if kept is not None:  # else no longer pending since the first query
                read.append(kept)
        return read


_PENDING_ROWS = PendingRows()
_USER = Job._meta.get_field("user").column


def _running(row: tuple[Any, ...], min_runtime: float) -> m.RunningJob:
    (
        job_id,
        team,
        user_id,
        flavor,
        gpus_per_worker,
        placement,
        priority,
        preemptible,
        submitted_at,
        admitted_at,
        max_runtime,
        expected_runtime,
        preempting_since,
        idle_reclaim_first,
    ) = row
    if isinstance(placement, str):  # jsonb arrives as text (Django registers that loader)
        placement = json.loads(placement)
    started = admitted_at if admitted_at is not None else submitted_at
    return m.RunningJob(
        id=job_id,
        team=team,
        user=str(user_id),
        flavor=flavor,
        gpus_per_worker=gpus_per_worker,
        placement=tuple(sorted((str(k), int(v)) for k, v in placement.items())),
        priority=priority,
        preemptible=preemptible,
        started_at=started,
        max_runtime=max_runtime,
        expected_runtime=expected_runtime,
        min_runtime_until=started + min_runtime,
        preempting_since=preempting_since,
        idle_reclaim_first=bool(idle_reclaim_first),
    )


def _pending(row: tuple[Any, ...]) -> tuple[m.PendingJob, str | None, int | None, int | None, str]:
    """A row of `_pending_sql`: the job, its stored reason (JSON text), positions and version."""
    (
        job_id,
        team,
        user_id,
        flavor,
        workers,
        gpus_per_worker,
        priority,
        preemptible,
        submitted_at,
        max_runtime,
        expected_runtime,
        reason,
        queue_position,
        cluster_position,
        xmin,
    ) = row
    job = m.PendingJob(
        id=job_id,
        team=team,
        user=str(user_id),
        flavor=flavor,
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        priority=priority,
        preemptible=preemptible,
        submitted_at=submitted_at,
        max_runtime=max_runtime,
        expected_runtime=expected_runtime,
    )
    return job, reason, queue_position, cluster_position, xmin
