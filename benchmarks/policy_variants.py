"""Benchmark: the Philly replay with fields of the engine's Policy changed, to measure what each
rule costs in mean delay and buys in fairness (docs/benchmarks.md, "What each rule costs").
Prints one line of numbers; not a test.

    .venv/bin/python benchmarks/policy_variants.py --load 0.8 reclaim=false max_reservations=0

Each KEY=VALUE sets a `gpuqueue.scheduler.model.Policy` field (booleans as true/false, `inf`
for no bound). `--start`/`--days` replay a window of the trace instead of all of it.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuqueue.scheduler.model import Policy  # noqa: E402
from gpuqueue.sim.simulator import SimConfig, simulate  # noqa: E402
from gpuqueue.sim.workload import build_cluster, load_jobs, workload  # noqa: E402

TRACE = ROOT.parent / "shared/traces/philly-pollux-processed/philly.csv"


def parse_policy(pairs: list[str]) -> Policy:
    kinds = {f.name: type(getattr(Policy(), f.name)) for f in fields(Policy)}
    changes: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in kinds:
            raise SystemExit(f"not a Policy field: {pair!r} (fields: {', '.join(kinds)})")
        kind = kinds[key]
        if kind is bool:
            if value.lower() not in ("true", "false"):
                raise SystemExit(f"{key} takes true or false, not {value!r}")
            changes[key] = value.lower() == "true"
        elif kind is int and value == "inf":
            changes[key] = sys.maxsize
        else:
            changes[key] = kind(value)
    return replace(Policy(), **changes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--start", type=float, default=0.0, help="days after the first job")
    parser.add_argument("--days", type=float, default=None, help="default: the whole trace")
    parser.add_argument("changes", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    policy = parse_policy(args.changes)
    jobs = load_jobs(args.trace, "philly", 8, None, 0, "skip")
    if args.start or args.days is not None:
        t0 = min(j.submitted_at for j in jobs)
        lo = t0 + args.start * 86400
        hi = lo + args.days * 86400 if args.days is not None else float("inf")
        jobs = [j for j in jobs if lo <= j.submitted_at < hi]
    started = time.perf_counter()
    sum(range(10**6))
    calibration = time.perf_counter() - started
    cluster = build_cluster(jobs, None, None, args.load, 8)
    w = workload(jobs, cluster, "proportional")
    result = simulate(w.jobs, w.cluster, w.teams, "gpuqueue", SimConfig(engine_policy=policy))
    s = result.summary
    keys = ("delay_mean_s", "delay_median_s", "delay_max_s", "delay_work_weighted_mean_s")
    hours = {k: float(s[k]) / 3600 for k in keys}
    print(
        f"{' '.join(args.changes) or 'default'}: load {args.load:.0%}, {len(jobs)} jobs, "
        f"{cluster.capacity()} GPUs | work-weighted {hours['delay_work_weighted_mean_s']:.1f} h,"
        f" mean {hours['delay_mean_s']:.1f} h, "
        f"median {hours['delay_median_s']:.1f} h, max {hours['delay_max_s']:.0f} h | "
        f"Jain {s['jain']:.3f} (teams >= 1 %: {s['jain_major_teams']:.3f}) | "
        f"guarantee violation {float(s['guarantee_violation_team_hours']):.0f} team-h | "
        f"preemptions {s['preemptions']}, GPU-h lost {float(s['gpu_hours_lost']):.0f} | "
        f"wall {result.wall_seconds:.1f} s (sum(range(10**6)) {calibration * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    main()
