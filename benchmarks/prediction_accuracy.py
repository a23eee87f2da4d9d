"""Benchmark: how close runtime predictions from history (gpuqueue/scheduler/prediction.py)
come to the runtimes jobs then have, over a whole trace. Prints numbers; not a test.

    .venv/bin/python benchmarks/prediction_accuracy.py [--window 64] [--min-samples 3]

Each job of the Philly trace, in submission order, is predicted from the jobs that finished
before it was submitted (a job finishes at its submission plus its runtime: the history a
cluster with no queue would have, the most it could know). Printed per setting: the median of
|log(predicted median / runtime)| (0.41 is a factor of 1.5), the shares of runtimes below the
prediction's 10th percentile, at or below its median and above its 90th percentile (10, 50
and 10 % for a prediction whose percentiles mean what they say), and which level answered.
`--window` and `--min-samples` take comma-separated values to compare settings.
"""

from __future__ import annotations

import argparse
import heapq
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kube_scale import calibration  # noqa: E402

from gpuqueue.scheduler.prediction import HIGH, LOW, MEDIAN, RuntimeHistory  # noqa: E402
from gpuqueue.sim.jobs import SimJob  # noqa: E402
from gpuqueue.sim.predicted import facts  # noqa: E402
from gpuqueue.sim.workload import load_jobs  # noqa: E402

TRACE = ROOT.parent / "shared/traces/philly-pollux-processed/philly.csv"


def measure(jobs: list[SimJob], window: int, min_samples: int) -> dict[str, float | str]:
    history = RuntimeHistory(window=window, min_samples=min_samples)
    finishing: list[tuple[float, int, SimJob]] = []  # (finish, id, job)
    log_errors: list[float] = []
    below = at_or_below_median = above = 0
    sources: dict[str, int] = {}
    for job in jobs:
        while finishing and finishing[0][0] <= job.submitted_at:
            _, _, done = heapq.heappop(finishing)
            history.record(facts(done), done.duration)
        heapq.heappush(finishing, (job.submitted_at + job.duration, job.id, job))
        prediction = history.predict(facts(job))
        if prediction is None or job.duration <= 0:
            continue
        median = prediction.quantile(MEDIAN)
        log_errors.append(abs(math.log(max(median, 1.0) / max(job.duration, 1.0))))
        below += job.duration < prediction.quantile(LOW)
        at_or_below_median += job.duration <= median
        above += job.duration > prediction.quantile(HIGH)
        sources[prediction.source] = sources.get(prediction.source, 0) + 1
    n = max(len(log_errors), 1)
    return {
        "predicted": len(log_errors),
        "median_abs_log": statistics.median(log_errors) if log_errors else 0.0,
        "below_p10": below / n,
        "at_or_below_p50": at_or_below_median / n,
        "above_p90": above / n,
        "sources": ", ".join(f"{k} {v:,}" for k, v in sorted(sources.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--window", default="64")
    parser.add_argument("--min-samples", default="3")
    args = parser.parse_args()
    jobs = sorted(
        load_jobs(args.trace, "philly", 8, None, 0, "skip"), key=lambda j: (j.submitted_at, j.id)
    )
    print(
        f"runtime predictions against runtimes: {len(jobs):,} jobs; calibration "
        f"sum(range(10**6)) best of 5 {calibration() * 1000:.1f} ms"
    )
    print(
        "| window | min samples | predicted | median abs log error | below p10 | at or below p50 "
        "| above p90 | answered by | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for window in (int(w) for w in args.window.split(",")):
        for min_samples in (int(m) for m in args.min_samples.split(",")):
            started = time.perf_counter()
            r = measure(jobs, window, min_samples)
            print(
                f"| {window} | {min_samples} | {r['predicted']:,} | {r['median_abs_log']:.3f} "
                f"| {r['below_p10']:.1%} | {r['at_or_below_p50']:.1%} | {r['above_p90']:.1%} "
                f"| {r['sources']} | {time.perf_counter() - started:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
