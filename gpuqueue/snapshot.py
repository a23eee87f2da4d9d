"""Build the engine's Snapshot and Policy from the database, in a handful of queries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings

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
    """Nodes, teams with quotas, and active jobs: five queries. With `stored`, also fills it
    with what each pending job shows now, so that the cycle writes only what changed without
    reading the queue a second time."""
    nodes = load_nodes()
    snapshot_teams = load_teams()
    running: list[m.RunningJob] = []
    pending: list[m.PendingJob] = []
    min_runtime = settings.GPUQUEUE_MIN_RUNTIME_SECONDS
    rows = (
        Job.objects.active()
        .values(
            "id",
            "state",
            "team__slug",
            "user_id",
            "flavor__name",
            "workers",
            "gpus_per_worker",
            "priority",
            "preemptible",
            "submitted_at",
            "admitted_at",
            "max_runtime_seconds",
            "expected_runtime_seconds",
            "placement",
            "checkpoint_requested_at",
            *(
                ("pending_reason", "queue_position", "cluster_position")
                if stored is not None
                else ()
            ),
        )
        .order_by("id")
    )
    for row in rows:
        if row["state"] in HOLDING:
            running.append(_running(row, min_runtime))
        else:
            pending.append(_pending(row))
            if stored is not None:
                stored[row["id"]] = (
                    row["pending_reason"],
                    row["queue_position"],
                    row["cluster_position"],
                )
    return m.Snapshot(
        now=now.timestamp(),
        nodes=nodes,
        teams=snapshot_teams,
        running=tuple(running),
        pending=tuple(pending),
    )


def _running(row: dict[str, Any], min_runtime: float) -> m.RunningJob:
    started = (row["admitted_at"] or row["submitted_at"]).timestamp()
    preempting = row["checkpoint_requested_at"] if row["state"] == JobState.PREEMPTING else None
    return m.RunningJob(
        id=row["id"],
        team=row["team__slug"],
        user=str(row["user_id"]),
        flavor=row["flavor__name"],
        gpus_per_worker=row["gpus_per_worker"],
        placement=tuple(sorted((str(k), int(v)) for k, v in row["placement"].items())),
        priority=row["priority"],
        preemptible=row["preemptible"],
        started_at=started,
        max_runtime=row["max_runtime_seconds"],
        expected_runtime=row["expected_runtime_seconds"],
        min_runtime_until=started + min_runtime,
        preempting_since=preempting.timestamp() if preempting else None,
    )


def _pending(row: dict[str, Any]) -> m.PendingJob:
    return m.PendingJob(
        id=row["id"],
        team=row["team__slug"],
        user=str(row["user_id"]),
        flavor=row["flavor__name"],
        workers=row["workers"],
        gpus_per_worker=row["gpus_per_worker"],
        priority=row["priority"],
        preemptible=row["preemptible"],
        submitted_at=row["submitted_at"].timestamp(),
        max_runtime=row["max_runtime_seconds"],
        expected_runtime=row["expected_runtime_seconds"],
    )
