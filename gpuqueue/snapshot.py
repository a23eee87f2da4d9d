"""Build the engine's Snapshot and Policy from the database, in a handful of queries."""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection

from gpuqueue.models import Flavor, Job, Node, Quota
from gpuqueue.scheduler import model as m
from gpuqueue.states import HOLDING, JobState
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
    node_capacity: dict[str, int], labels: dict[str, str], flavors: list[Flavor]
) -> dict[str, int]:
    """A node offers a flavor when it carries the flavor's labels and has its resource."""
    offered = {}
    for flavor in flavors:
        count = int(node_capacity.get(flavor.resource_name, 0))
        if count > 0 and flavor.matches(labels):
            offered[flavor.name] = count
    return offered


def load_nodes() -> tuple[m.Node, ...]:
    """Every node with its GPUs per flavor (two queries: flavors, nodes)."""
    flavors = list(Flavor.objects.all())
    by_resource = {f.name: f.resource_name for f in flavors}
    nodes = []
    for node in Node.objects.order_by("name"):
        capacity = node_capacity_by_flavor(node.capacity, node.labels, flavors)
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
    """Nodes, teams with quotas, and active jobs: six queries. With `stored`, also fills it
    with what each pending job shows now, so that the cycle writes only what changed without
    reading the queue a second time.

    The jobs are read through a cursor (see `gpuqueue.sql_rows`): with thousands pending, the
    ORM's per-row conversions (timestamps, a JSON placement that pending jobs never have) were
    most of a cycle. Times arrive as epoch seconds, which is what the engine takes, and a
    pending reason's JSON text is decoded once however many jobs share it."""
    nodes = load_nodes()
    snapshot_teams = load_teams()
    min_runtime = settings.GPUQUEUE_MIN_RUNTIME_SECONDS
    with connection.cursor() as cursor:
        cursor.execute(_running_sql(), [JobState.PREEMPTING.value, sorted(HOLDING)])
        running = [_running(row, min_runtime) for row in cursor.fetchall()]
        cursor.execute(_pending_sql(stored is not None), [JobState.PENDING.value])
        rows = cursor.fetchall()
    pending = [_pending(row) for row in rows]
    if stored is not None:
        decoded: dict[str | None, Any] = {None: None}
        for row in rows:
            text = row[_REASON]
            if text not in decoded:
                decoded[text] = json.loads(text)
            stored[row[0]] = (decoded[text], row[_REASON + 1], row[_REASON + 2])
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
        f"CASE WHEN {j}{quote('state')} = %s THEN {_epoch(quote, 'checkpoint_requested_at')} END "
        f"FROM {jobs} {teams} {flavors} "
        f"WHERE {j}{quote('state')} = ANY(%s) ORDER BY {j}{quote('id')}"
    )


@cache
def _pending_sql(with_stored: bool) -> str:
    quote, jobs, teams, flavors = _sql_names()
    j = f"{quote('j')}."
    stored = (
        f", {j}{quote('pending_reason')}::text, {j}{quote('queue_position')}, "
        f"{j}{quote('cluster_position')}"
        if with_stored
        else ""
    )
    return (
        f"SELECT {j}{quote('id')}, {quote('t')}.{quote('slug')}, {j}{quote(_USER)}, "
        f"{quote('f')}.{quote('name')}, {j}{quote('workers')}, {j}{quote('gpus_per_worker')}, "
        f"{j}{quote('priority')}, {j}{quote('preemptible')}, {_epoch(quote, 'submitted_at')}, "
        f"{j}{quote('max_runtime_seconds')}, {j}{quote('expected_runtime_seconds')}{stored} "
        f"FROM {jobs} {teams} {flavors} "
        f"WHERE {j}{quote('state')} = %s ORDER BY {j}{quote('id')}"
    )


_REASON = 11  # the pending query's column of the stored reason
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
    )


def _pending(row: tuple[Any, ...]) -> m.PendingJob:
    return m.PendingJob(
        id=row[0],
        team=row[1],
        user=str(row[2]),
        flavor=row[3],
        workers=row[4],
        gpus_per_worker=row[5],
        priority=row[6],
        preemptible=row[7],
        submitted_at=row[8],
        max_runtime=row[9],
        expected_runtime=row[10],
    )
