"""Benchmark: what predicting runtimes costs the admission cycle
(`gpuqueue.services.forecasts.runtime_history.with_predicted_runtimes`), per cycle, at the live
cycle's scale. Prints numbers; not a test.

    .venv/bin/python benchmarks/predicted_runtimes.py [--pending 43000] [--running 4000]

The database reads are replaced by their results (a history of 5,000 finished jobs, each
job's facts), which the service keeps between cycles anyway; what is timed is the CPU work of
a cycle. Cases: the first cycle of a process (every job predicted), a cycle after the history
is read again (every HISTORY_SECONDS), a steady cycle (nothing changed: every job as the
snapshot kept it), and a steady cycle with 1 % of the pending jobs new. "full" is the path
without the memos (predict every job, copy every job), for comparison. The synthetic jobs have
nearly all distinct facts (300 users x 20 names x shapes): the worst case for the memo of
medians by facts.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuqueue.settings")

import django  # noqa: E402

django.setup()

from gpuqueue.scheduler.band import with_runtimes  # noqa: E402
from gpuqueue.scheduler.model import PendingJob, RunningJob, Snapshot  # noqa: E402
from gpuqueue.scheduler.prediction import MEDIAN, JobFacts, RuntimeHistory  # noqa: E402
from gpuqueue.services.forecasts import runtime_history as rh  # noqa: E402


def calibration() -> float:
    started = time.perf_counter()
    sum(range(10**6))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pending", type=int, default=43_000)
    parser.add_argument("--running", type=int, default=4_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(1)
    teams = [f"team-{i}" for i in range(30)]
    facts: dict[int, JobFacts] = {}

    def fact() -> JobFacts:
        user = rng.randrange(300)
        return JobFacts(
            user=str(user),
            team=teams[user % 30],
            flavor="h100",
            workers=rng.choice((1, 1, 1, 2, 4)),
            gpus_per_worker=rng.choice((1, 2, 8)),
            name=f"exp-{rng.randrange(20)}",
        )

    history = RuntimeHistory()
    for _ in range(5000):
        history.record(fact(), rng.lognormvariate(8, 1.5))
    pending = []
    for i in range(args.pending):
        facts[i] = f = fact()
        pending.append(
            PendingJob(i, f.team, f.user, f.flavor, f.workers, f.gpus_per_worker, 0, True, 0.0)
        )
    running = []
    for i in range(args.pending, args.pending + args.running):
        facts[i] = f = fact()
        running.append(
            RunningJob(
                id=i,
                team=f.team,
                user=f.user,
                flavor=f.flavor,
                gpus_per_worker=f.gpus_per_worker,
                placement=(("n1", f.workers),),
                priority=0,
                preemptible=True,
                started_at=float(rng.randrange(36_000)),
            )
        )
    snapshot = Snapshot(
        now=40_000.0, nodes=(), teams=(), pending=tuple(pending), running=tuple(running)
    )
    # The database's answers, as the service keeps them between cycles.
    rh.runtime_history = lambda: history  # type: ignore[assignment]
    rh._facts_by_id = lambda ids: {i: facts[i] for i in ids if i in facts}  # type: ignore[assignment]

    def timed(fn) -> float:  # type: ignore[no-untyped-def]
        started = time.process_time()
        fn()
        return time.process_time() - started

    def full() -> None:
        with_runtimes(snapshot, rh.predictions_for(snapshot), MEDIAN)

    def cold() -> None:
        rh._PREDICTED_PENDING.__init__()  # type: ignore[misc]
        rh._PREDICTED_RUNNING.__init__()  # type: ignore[misc]
        rh.with_predicted_runtimes(snapshot)

    def reread() -> None:
        # The history read again (every HISTORY_SECONDS): another object, few medians moved.
        rh._PREDICTED_PENDING.history = rh._PREDICTED_RUNNING.history = None
        rh.with_predicted_runtimes(snapshot)

    new_jobs = [replace(j, id=j.id) for j in pending[: args.pending // 100]]
    churned = replace(snapshot, pending=tuple(new_jobs) + snapshot.pending[len(new_jobs) :])

    results = {}
    for name, fn, prime in (
        ("full (no memo)", full, None),
        ("cold (first cycle)", cold, None),
        ("history read again", reread, cold),
        ("steady, nothing changed", lambda: rh.with_predicted_runtimes(snapshot), cold),
        ("steady, 1 % of jobs new", lambda: rh.with_predicted_runtimes(churned), cold),
    ):
        times = []
        for _ in range(args.repeat):
            if prime is not None:
                prime()
            times.append(timed(fn))
        results[name] = statistics.median(times)
    print(
        f"predicted runtimes: {args.pending} pending, {args.running} running, "
        f"calibration sum(range(10**6)) {calibration() * 1000:.1f} ms"
    )
    for name, seconds in results.items():
        print(f"  {name:30s} {seconds * 1000:8.1f} ms CPU (median of {args.repeat})")


if __name__ == "__main__":
    main()
