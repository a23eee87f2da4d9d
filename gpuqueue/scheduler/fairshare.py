"""Fair share per team and flavor, computed once per cycle by water-filling.

Each team first gets min(guarantee, demand); what is left of the flavor goes to teams with unmet
demand in proportion to their weights, each capped by min(limit, demand). With departments the
same filling runs twice: among departments (and teams without one) over the flavor's capacity,
then among the teams of each department over the department's share.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpuqueue.scheduler.model import Quota, Snapshot


@dataclass(frozen=True, slots=True)
class Claim:
    """One party to a filling: who, its guarantee, the most it can take, its weight."""

    id: str
    guarantee: int
    cap: int
    weight: float


def water_fill(total: int, claims: list[Claim]) -> dict[str, int]:
    """Integer shares that sum to at most `total`, deterministic for equal inputs.

    1. Guarantees (bounded by cap) first; if they alone exceed `total`, scale them down.
    2. The rest by weight, fixing every party that reaches its cap, until none does.
    3. Round down, then hand out the leftover GPUs by largest fraction (then id).
    """
    return water_fill_tuples(total, [(c.id, c.guarantee, c.cap, c.weight) for c in claims])


# A claim as a plain tuple (id, guarantee, cap, weight): the engine fills every flavor on every
# plan (and the replay its backlog's shares on most cycles), and building a Claim per team cost
# more than the filling.
ClaimTuple = tuple[str, int, int, float]


def water_fill_tuples(total: int, claims: list[ClaimTuple]) -> dict[str, int]:
    """`water_fill` over (id, guarantee, cap, weight) tuples: the same arithmetic, in the same
    order, so the same shares."""
    total = max(total, 0)
    base = {cid: max(min(guarantee, cap), 0) for cid, guarantee, cap, _ in claims}
    given = sum(base.values())
    if given >= total:
        scale = max(given, 1)
        return _round({k: v * total / scale for k, v in base.items()}, total, base)
    share: dict[str, float] = {k: float(v) for k, v in base.items()}
    remaining = float(total - given)
    active = [c for c in claims if c[2] > base[c[0]] and c[3] > 0]
    while active and remaining > 1e-9:
        weights = sum(c[3] for c in active)
        per_weight = remaining / weights
        saturated = [c for c in active if share[c[0]] + c[3] * per_weight >= c[2]]
        if not saturated:
            for cid, _, _, weight in active:
                share[cid] += weight * per_weight
            remaining = 0.0
            break
        for cid, _, cap, _ in saturated:
            remaining -= cap - share[cid]
            share[cid] = float(cap)
        active = [c for c in active if share[c[0]] < c[2]]
    caps = {c[0]: c[2] for c in claims}
    return _round(share, min(total, sum(max(c[2], 0) for c in claims)), caps)


def _round(share: Mapping[str, float], total: int, caps: Mapping[str, int]) -> dict[str, int]:
    floors = {k: math.floor(v + 1e-9) for k, v in share.items()}
    result = {k: min(f, caps[k]) for k, f in floors.items()}
    leftover = total - sum(result.values())
    if leftover <= 0:
        return result
    order = sorted(share, key=lambda k: (-(share[k] - floors[k]), k))
    for k in order:
        if leftover <= 0:
            break
        if result[k] < caps[k] and share[k] - result[k] > 1e-9:
            result[k] += 1
            leftover -= 1
    return result


def capacity_by_flavor(snapshot: Snapshot) -> dict[str, int]:
    """GPUs of each flavor on schedulable nodes, less what others use there."""
    capacity: dict[str, int] = {}
    for node in snapshot.nodes:
        if node.schedulable:
            for flavor, gpus in node.capacity.items():
                free = max(gpus - node.used_externally.get(flavor, 0), 0)
                capacity[flavor] = capacity.get(flavor, 0) + free
    return capacity


def demand_by_team(
    snapshot: Snapshot,
    running: Mapping[tuple[str, str], int] | None = None,
    asked: Mapping[tuple[str, str], int] | None = None,
) -> dict[tuple[str, str], int]:
    """GPUs each team holds or asks for, per flavor (preempting jobs will ask again).

    `running` is the held part and `asked` the pending part, when the caller has summed them
    already (`Ledger.hold_running`, the engine's queues).
    """
    get: Callable[[tuple[str, str], int], int]
    if running is not None:
        demand = dict(running)
        get = demand.get
    else:
        demand = {}
        get = demand.get
        for r in snapshot.running:
            key = (r.team, r.flavor)
            demand[key] = get(key, 0) + r.gpus
    if asked is not None:
        for key, gpus in asked.items():
            demand[key] = get(key, 0) + gpus
        return demand
    for p in snapshot.pending:
        key = (p.team, p.flavor)
        demand[key] = get(key, 0) + p.gpus
    return demand


def _claim(team_id: str, wants: int, quota: Quota) -> Claim:
    return Claim(team_id, quota.guarantee, min(quota.limit, wants), quota.weight)


def fair_shares(
    snapshot: Snapshot,
    capacity: Mapping[str, int] | None = None,
    running: Mapping[tuple[str, str], int] | None = None,
    asked: Mapping[tuple[str, str], int] | None = None,
) -> dict[tuple[str, str], int]:
    """Fair share per (team or department, flavor); only parties with a quota appear.

    `capacity` is `capacity_by_flavor(snapshot)`, `running` the GPUs held and `asked` the GPUs
    pending per team and flavor, when the caller has them already.
    """
    teams = {t.id: t for t in snapshot.teams}
    departments = {t.parent for t in teams.values() if t.parent in teams}
    members: dict[str, list[str]] = {}
    for t in sorted(teams.values(), key=lambda t: t.id):
        if t.parent in teams:
            members.setdefault(t.parent, []).append(t.id)
    top = sorted(t.id for t in teams.values() if t.parent not in teams)
    demand = demand_by_team(snapshot, running, asked)
    result: dict[tuple[str, str], int] = {}
    if capacity is None:
        capacity = capacity_by_flavor(snapshot)
    for flavor, total in sorted(capacity.items()):
        wants = {t: demand.get((t, flavor), 0) for t in teams}
        for dept in departments:
            wants[dept] += sum(wants[m] for m in members[dept])
        claims: list[ClaimTuple] = []
        for tid in top:
            quota = teams[tid].quotas.get(flavor)
            if quota is not None:
                claims.append((tid, quota.guarantee, min(quota.limit, wants[tid]), quota.weight))
        for tid, share in water_fill_tuples(total, claims).items():
            result[(tid, flavor)] = share
        for dept in sorted(departments):
            if (dept, flavor) not in result:
                continue
            inner = [
                _claim(m, demand.get((m, flavor), 0), teams[m].quotas[flavor])
                for m in members[dept]
                if flavor in teams[m].quotas
            ]
            own = demand.get((dept, flavor), 0)
            if own:
                # A department's own jobs share its quota as one more member with no guarantee.
                inner.append(Claim(dept + "/", 0, own, 1.0))
            for tid, share in water_fill(result[(dept, flavor)], inner).items():
                if tid != dept + "/":
                    result[(tid, flavor)] = share
    return result
