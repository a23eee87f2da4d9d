"""Scheduling policies for replays: the gpuqueue engine and the baselines it is measured against."""

from __future__ import annotations

from collections.abc import Sequence

from gpuqueue.scheduler.model import Policy, Team
from gpuqueue.sim.cluster import Cluster
from gpuqueue.sim.ledger import Ledger
from gpuqueue.sim.policies.base import Decision, SchedulingPolicy
from gpuqueue.sim.policies.fifo import FifoBackfill, StrictFifo
from gpuqueue.sim.policies.podbypod import PodByPod

POLICIES = (
    "gpuqueue",
    "fifo",
    "backfill",
    "pod-by-pod",
    "easy-oracle",
    "easy-predicted",
    "fairshare",
)


def make_policy(
    name: str,
    ledger: Ledger,
    cluster: Cluster,
    teams: Sequence[Team],
    engine_policy: Policy | None = None,
    window: int | None = None,
    skip_idle_changes: bool = True,
    requeue_at_back: bool = False,
    forecast_every: float | None = None,
    gang_level: str = "",
    gang_level_required: bool = False,
) -> SchedulingPolicy:
    if name == "gpuqueue":
        from gpuqueue.sim.policies.gpuqueue import GpuqueueEngine

        return GpuqueueEngine(
            ledger,
            cluster,
            teams,
            engine_policy,
            window=window,
            skip_idle_changes=skip_idle_changes,
            requeue_at_back=requeue_at_back,
            forecast_every=forecast_every,
            gang_level=gang_level,
            gang_level_required=gang_level_required,
        )
    if name == "fifo":
        return StrictFifo(ledger)
    if name == "backfill":
        return FifoBackfill(ledger)
    if name == "pod-by-pod":
        return PodByPod(ledger)
    if name == "easy-oracle":
        from gpuqueue.sim.policies.easy import EasyOracle

        return EasyOracle(ledger)
    if name == "easy-predicted":
        from gpuqueue.sim.policies.easy import EasyBackfill

        return EasyBackfill(ledger)
    if name == "fairshare":
        from gpuqueue.sim.policies.fairshare import TeamFairShare

        return TeamFairShare(ledger, teams)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


__all__ = ["POLICIES", "Decision", "SchedulingPolicy", "make_policy"]
