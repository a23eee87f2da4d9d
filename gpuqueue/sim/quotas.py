"""Team quotas for a replay: proportional to use, from a YAML file, or shaped like Helios' VCs.

Every builder returns engine `Team`s with a quota for each flavor of the cluster, and covers every
team of the trace: a team without a quota could never run, and the replay would never end.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs installed (types-PyYAML)

from gpuqueue.scheduler.model import Quota, Team
from gpuqueue.sim.cluster import Cluster
from gpuqueue.sim.jobs import SimJob


def gpu_time_shares(jobs: Iterable[SimJob]) -> dict[tuple[str, str], float]:
    """Each team's share of its flavor's GPU-time in the trace, keyed (team, flavor)."""
    by_team: dict[tuple[str, str], float] = defaultdict(float)
    by_flavor: dict[str, float] = defaultdict(float)
    for j in jobs:
        by_team[(j.team, j.flavor)] += j.gpu_seconds
        by_flavor[j.flavor] += j.gpu_seconds
    return {k: v / by_flavor[k[1]] for k, v in sorted(by_team.items()) if by_flavor[k[1]] > 0}


def _floor_shares(shares: Mapping[str, float], capacity: int) -> dict[str, int]:
    """Whole-GPU guarantees that sum to at most `capacity` (largest remainders get the rest)."""
    exact = {t: s * capacity for t, s in shares.items()}
    given = {t: math.floor(v) for t, v in exact.items()}
    spare = capacity - sum(given.values())
    for t in sorted(exact, key=lambda t: (given[t] - exact[t], t))[: max(spare, 0)]:
        given[t] += 1
    return given


def proportional_quotas(
    jobs: list[SimJob],
    cluster: Cluster,
    guarantee_fraction: float = 1.0,
    limit_fraction: float = 1.0,
) -> tuple[Team, ...]:
    """Guarantees proportional to each team's GPU-time in the trace.

    `guarantee_fraction` of each flavor's capacity is divided by share (1.0: the guarantees add up
    to the cluster); every team may borrow up to `limit_fraction` of the flavor. Weights are equal,
    so idle capacity above guarantees is split evenly among the teams that ask for it.
    """
    shares = gpu_time_shares(jobs)
    quotas: dict[str, dict[str, Quota]] = defaultdict(dict)
    for flavor in cluster.flavors:
        capacity = cluster.capacity(flavor)
        of_flavor = {t: s for (t, f), s in shares.items() if f == flavor}
        guarantees = _floor_shares(of_flavor, int(capacity * guarantee_fraction))
        limit = max(1, int(capacity * limit_fraction))
        for team, guarantee in guarantees.items():
            quotas[team][flavor] = Quota(guarantee=guarantee, limit=max(limit, guarantee))
    return _complete(quotas, jobs, cluster)


def quotas_from_yaml(path: str | Path, jobs: list[SimJob], cluster: Cluster) -> tuple[Team, ...]:
    """Quotas from YAML; teams of the trace that it leaves out get the `default` entry.

    ```yaml
    default: {gpu: {guarantee: 0, limit: 64}}
    teams:
      6214e9: {gpu: {guarantee: 128, limit: 256, weight: 2}}
    ```
    Without a `default`, a team left out may borrow the whole flavor but has no guarantee.
    """
    with open(path) as f:
        doc: dict[str, Any] = yaml.safe_load(f) or {}
    quotas: dict[str, dict[str, Quota]] = defaultdict(dict)
    for team, flavors in (doc.get("teams") or {}).items():
        for flavor, q in flavors.items():
            quotas[str(team)][str(flavor)] = _quota(q)
    default = {str(f): _quota(q) for f, q in (doc.get("default") or {}).items()}
    return _complete(quotas, jobs, cluster, default)


def _quota(q: Mapping[str, Any]) -> Quota:
    return Quota(int(q.get("guarantee", 0)), int(q["limit"]), float(q.get("weight", 1.0)))


def helios_quotas(
    path: str | Path, jobs: list[SimJob], cluster: Cluster, day: str | None = None
) -> tuple[Team, ...]:
    """Quotas shaped like Helios' per-VC GPU table (`date,<vc...>,total`) on one day.

    Helios VCs are not the trace's teams, so the shape is borrowed by rank: the team with the
    most GPU-time gets the biggest VC's share of the cluster, and so on; teams beyond the VCs with
    GPUs get no guarantee. `day` defaults to the table's last row.
    """
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    row = next((r for r in rows if r["date"] == day), None) if day else rows[-1]
    if row is None:
        raise ValueError(f"{path}: no row for {day}")
    vcs = sorted(
        ((int(v), k) for k, v in row.items() if k not in ("date", "total") and int(v) > 0),
        reverse=True,
    )
    vc_total = sum(g for g, _ in vcs)
    quotas: dict[str, dict[str, Quota]] = defaultdict(dict)
    shares = gpu_time_shares(jobs)
    for flavor in cluster.flavors:
        capacity = cluster.capacity(flavor)
        ranked = sorted(
            (t for (t, f) in shares if f == flavor), key=lambda t: (-shares[(t, flavor)], t)
        )
        vc_share = {team: g / vc_total for team, (g, _) in zip(ranked, vcs, strict=False)}
        for team, guarantee in _floor_shares(vc_share, capacity).items():
            quotas[team][flavor] = Quota(guarantee=guarantee, limit=capacity)
    return _complete(quotas, jobs, cluster)


def _complete(
    quotas: Mapping[str, Mapping[str, Quota]],
    jobs: Iterable[SimJob],
    cluster: Cluster,
    default: Mapping[str, Quota] | None = None,
) -> tuple[Team, ...]:
    """Fill in a quota for every (team, flavor) the trace uses, and sort teams by id."""
    needed: dict[str, set[str]] = defaultdict(set)
    for j in jobs:
        needed[j.team].add(j.flavor)
    teams = []
    for team in sorted(set(needed) | set(quotas)):
        merged = dict(quotas.get(team, {}))
        for flavor in sorted(needed.get(team, ())):
            if flavor not in merged:
                merged[flavor] = (default or {}).get(flavor) or Quota(0, cluster.capacity(flavor))
        teams.append(Team(id=team, quotas=merged))
    return tuple(teams)
