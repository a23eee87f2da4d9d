"""Small builders for hand-checked replays: jobs and clusters in domain terms."""

from __future__ import annotations

from gpuqueue.scheduler.model import Quota, Team
from gpuqueue.sim import SimConfig, SimJob

# Cycles right after every change, so that hand-computed times are exact.
EXACT = SimConfig(cycle_interval=0.0, idle_cycle_interval=0.0, record_segments=True)


def job(
    id: int,
    at: float,
    runs: float,
    gpus: int = 1,
    workers: int = 1,
    team: str = "a",
    priority: int = 0,
) -> SimJob:
    return SimJob(
        id=id,
        team=team,
        submitted_at=at,
        duration=runs,
        workers=workers,
        gpus_per_worker=gpus,
        priority=priority,
        user=team,
    )


def team(id: str, guarantee: int, limit: int, weight: float = 1.0) -> Team:
    return Team(id=id, quotas={"gpu": Quota(guarantee, limit, weight)})
