"""The FGD fill-up on openb: pods arrive and never leave; how much of the cluster gets allocated.

This follows the FGD simulator's procedure (../shared/traces/fgd-simulator-expected-results)
with whole-GPU pods only, so that its numbers can be set beside FGD's BestFit and GpuPacking.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from gpuqueue.scheduler.model import Quota, Team
from gpuqueue.sim.cluster import Cluster
from gpuqueue.sim.jobs import SimJob
from gpuqueue.sim.simulator import ProgressCallback, SimConfig, simulate

NEVER = 1e15  # pods of the fill-up never leave


@dataclass(frozen=True, slots=True)
class FillUp:
    policy: str
    seed: int
    capacity: int
    # alloc[k]: GPUs allocated, as % of capacity, once arrived requests reach k % of capacity.
    alloc: list[float]
    pods: int
    wall_seconds: float


def fill_up(
    pods: Sequence[SimJob],
    cluster: Cluster,
    policy: str,
    seed: int,
    tune: float = 1.3,
    on_progress: ProgressCallback | None = None,
) -> FillUp:
    """1. Shuffle the pods (seeded), then sample more with replacement until the requests
       reach `tune` × capacity (FGD's `-tune 1.3`).
    2. Pods arrive in that order; the pods whose cumulative request crosses k % of capacity
       arrive together at virtual time k, so one admission cycle runs per percent step (the
       FGD simulator places pods one by one; with no departures the outcome of a greedy
       placement is the same, since a pod that does not fit never fits later).
    3. The allocation at step k is sampled right after that step's cycle.
    """
    rng = random.Random(seed)
    order = list(pods)
    rng.shuffle(order)
    capacity = cluster.capacity()
    target = tune * capacity
    total = sum(p.gpus for p in order)
    while total < target:
        extra = rng.choice(pods)
        order.append(extra)
        total += extra.gpus
    jobs = []
    arrived = 0
    steps = round(tune * 100)
    for i, p in enumerate(order):
        arrived += p.gpus
        step = min(int(100 * arrived / capacity + 0.999999), steps)
        jobs.append(
            SimJob(
                i, "openb", float(step), NEVER, p.workers, p.gpus_per_worker, p.flavor, user="openb"
            )
        )
    quotas = {f: Quota(cluster.capacity(f), cluster.capacity(f)) for f in cluster.flavors}
    teams = (Team("openb", quotas),)
    config = SimConfig(
        cycle_interval=0.0,
        idle_cycle_interval=0.0,
        sample_interval=1.0,
        window=None,
        until=float(steps),
    )
    result = simulate(jobs, cluster, teams, policy, config, on_progress)
    series = result.series
    alloc = [0.0] * (steps + 1)
    for t, held in zip(series.time, series.allocated, strict=True):
        if 0 <= t <= steps:
            alloc[int(t)] = 100.0 * held / capacity
    return FillUp(policy, seed, capacity, alloc, len(order), result.wall_seconds)
