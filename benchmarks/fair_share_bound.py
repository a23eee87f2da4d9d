"""Benchmark: does any team wait longer under gpuqueue than under plain fair share? Prints
numbers; not a test.

    .venv/bin/python benchmarks/fair_share_bound.py [--load 0.8] [--sample 0.1]
        [--seeds 1-8] [--quotas proportional[:F]] [--slack 1.1] [KEY=VALUE …]

KEY=VALUE sets a field of gpuqueue's engine Policy, as in benchmarks/policy_variants.py.

For each seed, replays the same sample with `gpuqueue` and with `fairshare` (weights only, no
guarantees: sim/policies/fairshare.py) on the same quotas, and prints per policy the
work-weighted mean wait (each job by its GPU-time), the per-job mean, the guarantee violations
(team-hours) and the preemptions; then every team whose
mean wait under gpuqueue is above `slack` times its wait under fair share (and at least an hour
more), with its guarantee. With `proportional` the guarantees add up to the cluster, so a team
without one (a small team: its share of the trace rounds to 0 GPUs) runs only on what the
guaranteed teams leave idle; `proportional:F` guarantees the fraction F, and the rest is shared
by weight. At the end, over all seeds, the per-job mean wait by shape (`shape`: one worker
of 1, 2, 4 or 8 GPUs, or a gang by its GPUs) for both policies.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
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
HOUR = 3600.0
POLICIES = ("gpuqueue", "fairshare")


def seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def shape(workers: int, gpus_per_worker: int) -> str:
    """The bucket a job's per-job mean is reported in."""
    if workers == 1:
        return f"1x{gpus_per_worker}"
    gpus = workers * gpus_per_worker
    return "gang <= 16" if gpus <= 16 else "gang <= 32" if gpus <= 32 else "gang > 32"


def by_shape(runs: list[JobRun], into: dict[str, list[float]]) -> None:
    """Adds each started job's wait (hours) to its shape's list."""
    for r in runs:
        if r.first_start is not None:
            wait = (r.first_start - r.job.submitted_at) / HOUR
            into[shape(r.job.workers, r.job.gpus_per_worker)].append(wait)


def waits(runs: list[JobRun]) -> tuple[float, float, dict[str, float]]:
    """Work-weighted mean, per-job mean (hours), and each team's per-job mean."""
    started = [r for r in runs if r.first_start is not None]
    wait = {r.job.id: (r.first_start or 0.0) - r.job.submitted_at for r in started}
    work = {r.job.id: r.job.gpus * r.job.duration for r in started}
    weighted = sum(wait[i] * work[i] for i in wait) / max(1e-9, sum(work.values()))
    by_team: dict[str, list[float]] = defaultdict(list)
    for r in started:
        by_team[r.job.team].append(wait[r.job.id])
    teams = {team: sum(w) / len(w) / HOUR for team, w in by_team.items()}
    return weighted / HOUR, sum(wait.values()) / max(1, len(wait)) / HOUR, teams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--sample", type=float, default=0.1)
    parser.add_argument("--seeds", default="1-8")
    parser.add_argument("--quotas", default="proportional")
    parser.add_argument("--slack", type=float, default=1.1)
    parser.add_argument("changes", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    config = SimConfig(engine_policy=parse_policy(args.changes))
    print(
        f"{args.quotas} {' '.join(args.changes)}, {args.sample:.0%} samples at"
        f" {args.load:.0%} load, seeds {args.seeds};"
        f" sum(range(10**6)) {calibration() * 1000:.1f} ms"
    )
    totals: dict[str, list[float]] = defaultdict(list)
    shapes: dict[str, dict[str, list[float]]] = {p: defaultdict(list) for p in POLICIES}
    over = 0
    for seed in seeds(args.seeds):
        jobs = load_jobs(args.trace, "philly", 8, args.sample, seed, "skip")
        cluster = build_cluster(jobs, None, None, args.load, 8)
        w = workload(jobs, cluster, args.quotas)
        guarantee = {t.id: sum(q.guarantee for q in t.quotas.values()) for t in w.teams}
        found = {}
        for policy in POLICIES:
            result = simulate(w.jobs, w.cluster, w.teams, policy, config)
            found[policy] = waits(result.runs)
            by_shape(result.runs, shapes[policy])
            s = result.summary
            totals[f"{policy} violations"].append(float(s["guarantee_violation_team_hours"]))
            totals[f"{policy} preemptions"].append(float(s["preemptions"]))
            totals[policy].append(found[policy][0])
            totals[f"{policy} per job"].append(found[policy][1])
        ours, theirs = found["gpuqueue"][2], found["fairshare"][2]
        worse = sorted(
            (team, ours[team], theirs.get(team, 0.0))
            for team in ours
            if ours[team] > args.slack * theirs.get(team, 0.0) and ours[team] - theirs[team] > 1
        )
        over += len(worse)
        print(
            f"seed {seed}: work-weighted {found['gpuqueue'][0]:.1f} h (fair share"
            f" {found['fairshare'][0]:.1f} h), per job {found['gpuqueue'][1]:.1f} h"
            f" ({found['fairshare'][1]:.1f} h), guarantee violations"
            f" {totals['gpuqueue violations'][-1]:.0f} team-h"
            f" ({totals['fairshare violations'][-1]:.0f}), preemptions"
            f" {totals['gpuqueue preemptions'][-1]:.0f}; teams waiting longer: "
            + (
                ", ".join(
                    f"{team} {a:.1f} h vs {b:.1f} h (guarantee {guarantee[team]})"
                    for team, a, b in worse
                )
                or "none"
            )
        )
    mean = {k: sum(v) / len(v) for k, v in totals.items()}
    print(
        f"mean over seeds: work-weighted {mean['gpuqueue']:.1f} h (fair share"
        f" {mean['fairshare']:.1f} h), per job {mean['gpuqueue per job']:.1f} h"
        f" ({mean['fairshare per job']:.1f} h); team-seeds waiting longer: {over};"
        f" guarantee violations {sum(totals['gpuqueue violations']):.0f} team-h"
        f" ({sum(totals['fairshare violations']):.0f}) and preemptions"
        f" {sum(totals['gpuqueue preemptions']):.0f} over all seeds"
    )
    print("per-job mean wait by shape (jobs): gpuqueue | fair share")
    ours, theirs = shapes["gpuqueue"], shapes["fairshare"]
    for name in sorted(ours, key=lambda n: (n.startswith("gang"), len(n), n)):
        a, b = ours[name], theirs[name]
        print(f"  {name:<10} ({len(a)}): {sum(a) / len(a):.1f} h | {sum(b) / max(1, len(b)):.1f} h")


if __name__ == "__main__":
    main()
