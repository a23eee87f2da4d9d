"""Benchmark: the estimated start with its band (`gpuqueue.scheduler.band.forecast_band`) at
500 nodes and 5,000 pending jobs, the target being at most 2 s of CPU.

    .venv/bin/python benchmarks/forecast_band.py [--nodes 500] [--pending 5000] [--repeat 3]

The snapshot is the engine benchmark's `large` shape at this size (gpuqueue/scheduler/bench.py),
and every job gets a runtime prediction drawn from a few typical distributions, as the service
gives them from its history. Each team and flavor carries a share balance from 16 h x 8 GPUs
in debt to 8 h x 8 GPUs owed, as the live cycle hands the forecast its stored balances
(`--no-balances`: none, as this benchmark measured before the forecast moved them). Prints CPU
seconds per band (median of the repeats) and the share of pending jobs with an estimate.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import replace

from gpuqueue.scheduler.band import forecast_band
from gpuqueue.scheduler.bench import large
from gpuqueue.scheduler.model import Policy, Snapshot
from gpuqueue.scheduler.prediction import Prediction
from gpuqueue.scheduler.runtime import paused_gc


def predictions(job_ids: list[int], seed: int) -> dict[int, Prediction]:
    """Log-normal-ish runtimes around a few medians (10 min to 8 h), 20 samples each."""
    rng = random.Random(seed)
    shapes = []
    for median in (600.0, 1800.0, 3600.0, 4 * 3600.0, 8 * 3600.0):
        runtimes = sorted(median * rng.lognormvariate(0.0, 0.8) for _ in range(20))
        shapes.append(Prediction(tuple(runtimes), "team_shape"))
    return {job_id: rng.choice(shapes) for job_id in job_ids}


def balances(snapshot: Snapshot, seed: int) -> dict[tuple[str, str], float]:
    """Every (team, flavor) with a quota: from past the borrowing threshold of an 8-GPU job
    (8 h x 8 GPUs) twice over, to owed."""
    rng = random.Random(seed)
    return {
        (team.id, flavor): rng.uniform(-16, 8) * 3600 * 8
        for team in snapshot.teams
        for flavor in sorted(team.quotas)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--running", type=int, default=2000)
    parser.add_argument("--pending", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-balances", action="store_true")
    args = parser.parse_args()
    snapshot = large(args.nodes, 30, args.running, args.pending, args.seed)
    if not args.no_balances:
        snapshot = replace(snapshot, share_balance=balances(snapshot, args.seed))
    ids = [j.id for j in snapshot.running] + [j.id for j in snapshot.pending]
    known = predictions(ids, args.seed)
    cpu: list[float] = []
    estimates = {}
    for _ in range(args.repeat):
        started = time.process_time()
        with paused_gc():
            estimates = forecast_band(snapshot, known, Policy())
        cpu.append(time.process_time() - started)
    with_estimate = sum(1 for e in estimates.values() if e.likely is not None)
    with_band = sum(1 for e in estimates.values() if e.late is not None)
    print(
        f"forecast band: {len(snapshot.nodes)} nodes, {len(snapshot.running)} running, "
        f"{len(snapshot.pending)} pending, "
        f"{len(snapshot.share_balance or {})} share balances: "
        f"CPU median {statistics.median(cpu):.2f} s "
        f"(runs {', '.join(f'{c:.2f}' for c in cpu)}); "
        f"{with_estimate / len(estimates):.1%} with an estimate, "
        f"{with_band / len(estimates):.1%} with a closed band"
    )


if __name__ == "__main__":
    main()
