"""Benchmark: how honest the estimated start is, measured in Philly replays. Prints
numbers; not a test.

    .venv/bin/python benchmarks/forecast_honesty.py [--loads 0.5,0.8,1.0,1.2] [--days 14]

Each load replays a window of the Philly trace (`--start` days after its first submission,
`--days` long; the cluster sized for that load over the window) with the gpuqueue policy and
`SimConfig.forecast_every` = 1 h (gpuqueue/sim/honesty.py): at every hourly sample, every
pending job's most likely start and 10-90 % band, from runtime predictions learnt online. A
window rather than the whole trace: at 100-120 % load the whole trace keeps 10,000-20,000 jobs
pending, and forecasting all of them every hour for 110 days would take hours. Prints per
load the share of sampled jobs with an estimate, the share that started inside their band (and
of the estimates, the shares that started after and before it), and the median error of the
most likely start relative to the wait (targets: >= 95 %, >= 80 %, <= 25 %), and the band's
median width relative to the most likely wait.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kube_scale import calibration  # noqa: E402

from gpuqueue.sim.simulator import SimConfig, simulate  # noqa: E402
from gpuqueue.sim.workload import build_cluster, load_jobs, workload  # noqa: E402

TRACE = ROOT.parent / "shared/traces/philly-pollux-processed/philly.csv"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--loads", default="0.5,0.8,1.0,1.2")
    parser.add_argument("--start", type=float, default=63.0, help="days after the first job")
    parser.add_argument("--days", type=float, default=14.0)
    args = parser.parse_args()
    jobs = load_jobs(args.trace, "philly", 8, None, 0, "skip")
    t0 = min(j.submitted_at for j in jobs)
    lo, hi = t0 + args.start * 86400, t0 + (args.start + args.days) * 86400
    jobs = [j for j in jobs if lo <= j.submitted_at < hi]
    print(
        f"forecast honesty: Philly days {args.start:g}-{args.start + args.days:g}, "
        f"{len(jobs)} jobs, hourly samples; calibration sum(range(10**6)) best of 5 "
        f"{calibration() * 1000:.1f} ms"
    )
    print(
        "| load | GPUs | sampled | with an estimate | inside the band | after / before it |"
        " median error / wait | band width / wait | mean delay (h) | forecast CPU (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for load in (float(x) for x in args.loads.split(",")):
        cluster = build_cluster(jobs, None, None, load, 8)
        w = workload(jobs, cluster, "proportional")
        result = simulate(w.jobs, w.cluster, w.teams, "gpuqueue", SimConfig(forecast_every=3600))
        s = result.summary
        print(
            f"| {load:.0%} | {cluster.capacity()} | {s['forecast_jobs']:,} "
            f"| {s['forecast_estimated']:.1%} | {s['forecast_in_band']:.1%} "
            f"| {s['forecast_after_band']:.1%} / {s['forecast_before_band']:.1%} "
            f"| {s['forecast_error_median']:.0%} | {s['forecast_band_width_median']:.1f}× "
            f"| {s['delay_mean_s'] / 3600:.1f} "
            f"| {s['forecast_seconds']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
