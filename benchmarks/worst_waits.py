"""Benchmark: where a replay's worst waits come from. Prints numbers; not a test.

    .venv/bin/python benchmarks/worst_waits.py --load 0.8 [--top 10] [KEY=VALUE …]

KEY=VALUE sets a field of the engine's Policy, as in benchmarks/policy_variants.py.

Replays the whole Philly trace, then prints the jobs that waited longest before they first
started (team, shape, submission, wait, runtime) and, for the worst of them, who ran instead:
the jobs of its team submitted after it that started before it (count, GPU-hours, shapes),
those submitted before it, the GPUs its team held on average while it waited, and the team's
running jobs at a few moments of the wait (docs/benchmarks.md, "The worst waits").
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kube_scale import calibration  # noqa: E402
from policy_variants import parse_policy  # noqa: E402

from gpuqueue.sim.run import JobRun  # noqa: E402
from gpuqueue.sim.simulator import SimConfig, simulate  # noqa: E402
from gpuqueue.sim.workload import build_cluster, load_jobs, workload  # noqa: E402

TRACE = ROOT.parent / "shared/traces/philly-pollux-processed/philly.csv"
DAY = 86400.0


def start(run: JobRun) -> float:
    assert run.first_start is not None  # the runs read here all started
    return run.first_start


def wait(run: JobRun) -> float:
    return start(run) - run.job.submitted_at


def gpu_hours(runs: list[JobRun]) -> float:
    return sum(run.job.gpus * run.job.duration for run in runs) / 3600


def shape(run: JobRun) -> str:
    return f"{run.job.workers}x{run.job.gpus_per_worker}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--policy", default="gpuqueue")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("changes", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    config = SimConfig(record_segments=True, engine_policy=parse_policy(args.changes))
    jobs = load_jobs(args.trace, "philly", 8, None, 0, "skip")
    cluster = build_cluster(jobs, None, None, args.load, 8)
    w = workload(jobs, cluster, "proportional")
    result = simulate(w.jobs, w.cluster, w.teams, args.policy, config)
    runs = [run for run in result.runs if run.first_start is not None]
    runs.sort(key=wait)
    print(
        f"{args.policy} {' '.join(args.changes)} at {args.load:.0%} load: {len(runs)} jobs, "
        f"{cluster.capacity()} GPUs, "
        f"wall {result.wall_seconds:.1f} s (sum(range(10**6)) {calibration() * 1000:.1f} ms)"
    )
    for run in reversed(runs[-args.top :]):
        print(
            f"  {wait(run) / 3600:8.1f} h  team {run.job.team} {shape(run):>5}  submitted day "
            f"{run.job.submitted_at / DAY:5.1f}  runtime {run.job.duration / 3600:6.1f} h"
        )
    worst = runs[-1]
    submitted, started = worst.job.submitted_at, start(worst)
    team = [run for run in runs if run.job.team == worst.job.team and run is not worst]
    before = [r for r in team if start(r) < started]
    later = [r for r in before if r.job.submitted_at > submitted]
    earlier = [r for r in before if r.job.submitted_at <= submitted]
    print(f"the worst: job {worst.job.id}, team {worst.job.team}, {shape(worst)}")
    print(
        f"  started before it, submitted after it: {len(later)} jobs, "
        f"{gpu_hours(later):,.0f} GPU-h, shapes {dict(collections.Counter(map(shape, later)))}"
    )
    print(
        f"  started before it, submitted before it: {len(earlier)} jobs, "
        f"{gpu_hours(earlier):,.0f} GPU-h"
    )
    by_id = {run.job.id: run for run in team}
    # What the team held while it waited, from the GPUs each job held node by node.
    mine = [seg for seg in result.segments if seg.job_id in by_id]
    held = sum(
        seg.gpus * max(0.0, min(started, seg.end) - max(submitted, seg.start)) for seg in mine
    )
    print(f"  GPUs its team held on average while it waited: {held / (started - submitted):.1f}")
    for share in (0.25, 0.5, 0.75):
        at = submitted + share * (started - submitted)
        holding = {seg.job_id for seg in mine if seg.start <= at < seg.end}
        kinds = collections.Counter(
            f"{shape(by_id[i])} submitted day {by_id[i].job.submitted_at / DAY:.1f}"
            for i in holding
        )
        runs_then = ", ".join(f"{n} × {kind}" for kind, n in sorted(kinds.items()))
        print(f"  day {at / DAY:5.1f}: its team runs {runs_then or 'nothing'}")


if __name__ == "__main__":
    main()
