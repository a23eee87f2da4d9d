"""Reads about the cluster's GPUs that several writers and the API share.

Capacity always comes from Node rows (the cluster watcher keeps them), never from the cluster.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.db.models import Count, Q, Sum

from gpuqueue.core import caches
from gpuqueue.core.states import HOLDING, JobState
from gpuqueue.models import Flavor, Job, Node, Quota, gpu_share
from gpuqueue.services.quotas.fair_shares import stored_fair_shares
from gpuqueue.services.quotas.share_balance import balance_hours


def node_capacity_by_flavor(
    node_capacity: dict[str, int],
    labels: dict[str, str],
    flavors: list[Flavor],
    *,
    taints: Iterable[Mapping[str, str]],
    devices: Mapping[str, int],
) -> dict[str, int]:
    """A node offers a flavor when it carries the flavor's labels, has its resource, has the
    devices its fabric asks for (`Flavor.fabric_fits`), and every taint that would keep pods
    off it is tolerated by the flavor's pods (`Flavor.tolerates`).
    A shared flavor's resource counts slices: the node offers that many ÷ slices per GPU."""
    node_taints = list(taints)  # read once for every flavor
    offered = {}
    for flavor in flavors:
        count = flavor.gpus_of(int(node_capacity.get(flavor.resource_name, 0)))
        if (
            count > 0
            and flavor.matches(labels)
            and flavor.fabric_fits(devices)
            and flavor.tolerates(node_taints)
        ):
            offered[flavor.name] = count
    return offered


def flavor_nodes(flavor: Flavor) -> list[Node]:
    """Known nodes that offer `flavor`: they carry its labels, have its resource and have no
    taint its pods do not tolerate (as `node_capacity_by_flavor`)."""
    nodes = Node.objects.filter(capacity__has_key=flavor.resource_name)
    if flavor.node_selector:
        nodes = nodes.filter(labels__contains=flavor.node_selector)
    return [
        n
        for n in nodes
        if flavor.gpus_of(int(n.capacity.get(flavor.resource_name, 0) or 0)) > 0
        and flavor.fabric_fits(n.devices)
        and flavor.tolerates(n.taints)
    ]


@dataclass(frozen=True)
class FlavorSize:
    """The most GPUs of a flavor one known node has, all known nodes together, and how many
    nodes have each size (ready or not: a node down for maintenance comes back)."""

    sizes: Mapping[int, int]  # GPUs per node -> how many such nodes

    @property
    def largest_node(self) -> int:
        return max(self.sizes)

    @property
    def total(self) -> int:
        return sum(size * count for size, count in self.sizes.items())


def flavor_size(flavor: Flavor) -> FlavorSize | None:
    """None when no node of `flavor` is known yet."""
    sizes = [flavor.gpus_of(int(n.capacity[flavor.resource_name])) for n in flavor_nodes(flavor)]
    return FlavorSize(Counter(sizes)) if sizes else None


# Per process (`gpuqueue.core.caches`): every submission checks its gang against the nodes of
# its flavor, which read through the ORM cost a fifth more CPU per submission
# (benchmarks/api_load.py). The cluster sync writes nodes in bulk, unseen by the epoch: a new
# node size counts within the caches' MAX_AGE_SECONDS.
_sizes: caches.Kept[int, FlavorSize] = caches.Kept()


def flavor_size_cached(flavor: Flavor) -> FlavorSize | None:
    return caches.read_through(_sizes, flavor.pk, lambda: flavor_size(flavor))


def flavor_capacity(flavor: Flavor, *, schedulable_only: bool = False) -> int:
    """GPUs of `flavor` on ready nodes (drained or cordoned nodes count unless asked not to:
    closing a node for maintenance is not a reason to re-plan quotas)."""
    total = 0
    for node in flavor_nodes(flavor):
        if not node.ready or (schedulable_only and not node.schedulable):
            continue
        total += flavor.gpus_of(int(node.capacity[flavor.resource_name]))
    return total


def held_non_preemptible(team_id: int, flavor_id: int) -> float:
    """GPUs the team's non-preemptible jobs of `flavor` hold right now (fractions counted)."""
    row = Job.objects.filter(
        team_id=team_id, flavor_id=flavor_id, preemptible=False, state__in=HOLDING
    ).aggregate(gpus=Sum(gpu_share()))
    return _gpus(row["gpus"])


def _gpus(value: float | None) -> float:
    """A sum of GPUs: whole unless fractions make it not, to the thousandth."""
    gpus = round(float(value or 0), 3)
    return int(gpus) if gpus.is_integer() else gpus


@dataclass
class TeamUsage:
    team: str
    allocated: float = 0  # GPUs: fractional jobs count their thousandths
    pending_gpus: float = 0
    pending_jobs: int = 0
    running_jobs: int = 0
    guarantee: int | None = None
    limit: int | None = None
    weight: float | None = None
    # GPUs the last admission cycle's plan entitled the team to; None before any cycle.
    fair_share: int | None = None
    # Time-based fair share: GPU-hours the team received less than its fair share lately,
    # decayed (positive: owed, negative: in debt); None before any cycle kept one.
    share_balance_gpu_hours: float | None = None


@dataclass
class FlavorUsage:
    flavor: str
    capacity: int = 0
    schedulable_capacity: int = 0
    allocated: float = 0
    pending_gpus: float = 0
    pending_jobs: int = 0
    running_jobs: int = 0
    teams: list[TeamUsage] = field(default_factory=list)


def usage_now() -> list[FlavorUsage]:
    """Cluster-wide figures per flavor and team, in six queries: aggregates only, no job
    details, so that every signed-in user may read them."""
    flavors = list(Flavor.objects.all())
    nodes = list(Node.objects.all())
    out: dict[str, FlavorUsage] = {f.name: FlavorUsage(f.name) for f in flavors}
    for flavor in flavors:
        for node in nodes:
            gpus = flavor.gpus_of(int(node.capacity.get(flavor.resource_name, 0) or 0))
            if gpus <= 0 or not flavor.matches(node.labels) or not node.ready:
                continue
            used = flavor.gpus_held_by(int(node.used_externally.get(flavor.resource_name, 0) or 0))
            out[flavor.name].capacity += gpus
            if node.schedulable:
                out[flavor.name].schedulable_capacity += max(gpus - used, 0)
    per_team: dict[tuple[str, str], TeamUsage] = {}

    def team_usage(flavor: str, team: str) -> TeamUsage:
        if (flavor, team) not in per_team:
            per_team[(flavor, team)] = TeamUsage(team)
        return per_team[(flavor, team)]

    gpus = gpu_share()
    rows = (
        Job.objects.active()
        .values("flavor__name", "team__slug")
        .annotate(
            allocated=Sum(gpus, filter=Q(state__in=HOLDING)),
            pending_gpus=Sum(gpus, filter=Q(state=JobState.PENDING)),
            pending_jobs=Count("id", filter=Q(state=JobState.PENDING)),
            running_jobs=Count("id", filter=Q(state__in=HOLDING)),
        )
        .order_by()
    )
    for row in rows:
        usage = team_usage(row["flavor__name"], row["team__slug"])
        usage.allocated = _gpus(row["allocated"])
        usage.pending_gpus = _gpus(row["pending_gpus"])
        usage.pending_jobs = int(row["pending_jobs"] or 0)
        usage.running_jobs = int(row["running_jobs"] or 0)
    for quota in Quota.objects.select_related("team", "flavor"):
        usage = team_usage(quota.flavor.name, quota.team.slug)
        usage.guarantee, usage.limit, usage.weight = quota.guarantee, quota.limit, quota.weight
    for (team, flavor_name), hours in balance_hours().items():
        if (flavor_name, team) in per_team:  # a team with no quota nor jobs left: not shown
            per_team[(flavor_name, team)].share_balance_gpu_hours = round(hours, 2)
    for (team, flavor_name), gpus in stored_fair_shares().items():
        if (flavor_name, team) in per_team:
            per_team[(flavor_name, team)].fair_share = gpus
    by_flavor: dict[str, list[TeamUsage]] = defaultdict(list)
    for (flavor_name, _), usage in sorted(per_team.items()):
        by_flavor[flavor_name].append(usage)
    for name, usage in out.items():
        usage.teams = by_flavor.get(name, [])
        usage.allocated = _gpus(sum(t.allocated for t in usage.teams))
        usage.pending_gpus = _gpus(sum(t.pending_gpus for t in usage.teams))
        usage.pending_jobs = sum(t.pending_jobs for t in usage.teams)
        usage.running_jobs = sum(t.running_jobs for t in usage.teams)
    return list(out.values())
