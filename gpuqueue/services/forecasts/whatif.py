"""What if the quotas were different? Replay recorded submissions through the simulator.

The pure part (parsing quota changes, turning recorded jobs into simulator jobs, comparing two
runs) is separate from the database reads so that it can be tested without one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuqueue.scheduler.model import Quota, Team
from gpuqueue.sim import Cluster, SimJob, SimNode, simulate
from gpuqueue.sim.simulator import Result, SimConfig

QUOTA_SPEC = re.compile(
    r"^(?P<team>[a-z0-9-]+)=(?P<flavor>[a-z0-9-]+):(?P<guarantee>\d+):(?P<limit>\d+):(?P<weight>\d+(\.\d+)?)$"
)
DEFAULT_DURATION_SECONDS = 3600.0


class QuotaSpecError(ValueError):
    pass


@dataclass(frozen=True)
class QuotaChange:
    team: str
    flavor: str
    quota: Quota


def parse_quota_change(spec: str) -> QuotaChange:
    """TEAM=FLAVOR:GUARANTEE:LIMIT:WEIGHT, e.g. team-b=h100:16:48:2."""
    match = QUOTA_SPEC.match(spec.strip())
    if match is None:
        raise QuotaSpecError(
            f"{spec!r} is not TEAM=FLAVOR:GUARANTEE:LIMIT:WEIGHT (e.g. team-b=h100:16:48:1)"
        )
    guarantee, limit = int(match["guarantee"]), int(match["limit"])
    if guarantee > limit:
        raise QuotaSpecError(f"{spec!r}: the guarantee ({guarantee}) exceeds the limit ({limit})")
    return QuotaChange(
        match["team"], match["flavor"], Quota(guarantee, limit, float(match["weight"]))
    )


def apply_changes(teams: Sequence[Team], changes: Iterable[QuotaChange]) -> tuple[Team, ...]:
    by_id = {t.id: t for t in teams}
    for change in changes:
        if change.team not in by_id:
            raise QuotaSpecError(f"no team {change.team!r}; teams: {', '.join(sorted(by_id))}")
        team = by_id[change.team]
        by_id[change.team] = Team(
            team.id, {**team.quotas, change.flavor: change.quota}, team.parent
        )
    return tuple(by_id[t.id] for t in teams)


def recorded_duration(job: Mapping[str, Any], now: datetime) -> float | None:
    """How long a recorded job runs when left alone; None when it never ran and never will."""
    started, finished = job["started_at"], job["finished_at"]
    expected = job["expected_runtime_seconds"] or job["max_runtime_seconds"]
    if started and finished:
        return max(1.0, (finished - started).total_seconds())
    if finished:  # ended without running (cancelled while pending)
        return None
    if started:  # still running: at least as long as so far
        return max(float(expected or 0), (now - started).total_seconds(), 1.0)
    return float(expected or DEFAULT_DURATION_SECONDS)


def to_sim_jobs(rows: Iterable[Mapping[str, Any]], since: datetime, now: datetime) -> list[SimJob]:
    jobs = []
    for row in rows:
        duration = recorded_duration(row, now)
        if duration is None:
            continue
        jobs.append(
            SimJob(
                id=row["id"],
                team=row["team_slug"],
                user=str(row["user_id"]),
                submitted_at=(row["submitted_at"] - since).total_seconds(),
                duration=duration,
                workers=row["workers"],
                gpus_per_worker=row["gpus_per_worker"],
                flavor=row["flavor_name"],
                priority=row["priority"],
                preemptible=row["preemptible"],
            )
        )
    return sorted(jobs, key=lambda j: (j.submitted_at, j.id))


def cluster_of(nodes: Iterable[tuple[str, Mapping[str, int]]]) -> Cluster:
    """The simulator gives each node one flavor; a node offering several is split."""
    sim_nodes = []
    for name, capacity in nodes:
        for flavor, gpus in sorted(capacity.items()):
            if gpus > 0:
                label = name if len(capacity) == 1 else f"{name}/{flavor}"
                sim_nodes.append(SimNode(label, flavor, gpus))
    return Cluster(tuple(sim_nodes))


@dataclass(frozen=True)
class TeamDelta:
    team: str
    jobs: int
    wait_before_s: float
    wait_after_s: float

    @property
    def change(self) -> str:
        if self.wait_before_s == 0:
            return "n/a" if self.wait_after_s == 0 else "+∞"
        return f"{(self.wait_after_s - self.wait_before_s) / self.wait_before_s:+.0%}"


def compare(before: Result, after: Result) -> list[TeamDelta]:
    rows_before = {row["team"]: row for row in before.teams}
    rows_after = {row["team"]: row for row in after.teams}
    return [
        TeamDelta(
            team,
            int(rows_before.get(team, rows_after[team])["jobs"]),  # type: ignore[call-overload]
            float(rows_before.get(team, {}).get("delay_mean_s", 0.0)),  # type: ignore[arg-type]
            float(rows_after.get(team, {}).get("delay_mean_s", 0.0)),  # type: ignore[arg-type]
        )
        for team in sorted(set(rows_before) | set(rows_after))
    ]


def replay_both(
    jobs: Sequence[SimJob],
    cluster: Cluster,
    current: Sequence[Team],
    changed: Sequence[Team],
    config: SimConfig | None = None,
) -> tuple[Result, Result]:
    config = config or SimConfig(cycle_interval=10.0)
    return (
        simulate(jobs, cluster, current, "gpuqueue", config),
        simulate(jobs, cluster, changed, "gpuqueue", config),
    )
