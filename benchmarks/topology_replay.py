"""The cost of topology: a Philly replay on racks, without levels, preferring one rack, and
requiring one.

    python benchmarks/topology_replay.py [--trace PATH] [--cluster 80x8:rack=8:block=4]
        [--sample FRACTION] [--modes none,prefer,require] [--patience S] [--reserve S]
        [--split-cost F] [--cycle-interval S] [--why] [--worst N]

Prints one JSON line per mode: the mean and maximum queueing delay until the first start and
wait over every attempt (hours), the gangs of
several workers, how many of them could fit one rack (workers x GPUs within a rack's GPUs),
and how many of those were placed in one rack every time they started. Mode `none` replays the
same nodes with no levels. Targets: with every
gang preferring a rack, at least 95 % of those that could fit one placed in one, and the mean
and maximum delay within 5 % of the replay without levels. `--cycle-interval` replays the same
rules on another beat of the admission loop: a figure that moves with it is chance.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

# The checkout this script is in, not the one the virtual environment was installed from.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuqueue.scheduler.model import Policy
from gpuqueue.sim.cluster import RACK_LABEL, Cluster
from gpuqueue.sim.run import JobRun
from gpuqueue.sim.simulator import SimConfig, simulate
from gpuqueue.sim.workload import build_cluster, load_jobs, workload

TRACE = "../shared/traces/philly-pollux-processed/philly.csv"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default=TRACE)
    parser.add_argument("--cluster", default="80x8:rack=8:block=4")
    parser.add_argument("--sample", type=float)
    parser.add_argument("--modes", default="none,prefer,require")
    parser.add_argument(
        "--patience", type=float, help="Policy.topology_patience_seconds (default: its own)"
    )
    parser.add_argument(
        "--why", action="store_true", help="count why each split gang was split (instrumented)"
    )
    parser.add_argument(
        "--patience-from-fit",
        action="store_true",
        help="experiment: patience counted from the first plan with free GPUs enough",
    )
    parser.add_argument(
        "--reserve", type=float, help="Policy.topology_reserve_seconds (default: its own)"
    )
    parser.add_argument(
        "--worst", type=int, default=0, help="also list the N jobs that waited longest"
    )
    parser.add_argument(
        "--split-cost", type=float, help="Policy.topology_split_cost (default: its own)"
    )
    parser.add_argument(
        "--cycle-interval",
        type=float,
        default=SimConfig().cycle_interval,
        help="SimConfig.cycle_interval: other values replay the same rules on another beat",
    )
    args = parser.parse_args()
    if args.patience_from_fit:
        import topology_why

        topology_why.install_patience_from_fit()
    if args.why:
        import topology_why

        topology_why.install()
    jobs = load_jobs(args.trace, "philly", 8, args.sample, 0, "skip")
    cluster = build_cluster(jobs, args.cluster, None, None, 8)
    w = workload(jobs, cluster)
    rack_of = {n.name: dict(n.labels).get(RACK_LABEL, "") for n in cluster.nodes}
    rack_gpus: dict[str, int] = defaultdict(int)
    for n in cluster.nodes:
        rack_gpus[rack_of[n.name]] += n.gpus
    smallest_rack = min(rack_gpus.values())
    base = SimConfig(record_segments=True, cycle_interval=args.cycle_interval)
    policy = Policy()
    if args.patience is not None:
        policy = replace(policy, topology_patience_seconds=args.patience)
    if args.reserve is not None:
        policy = replace(policy, topology_reserve_seconds=args.reserve)
    if args.split_cost is not None:
        policy = replace(policy, topology_split_cost=args.split_cost)
    base = replace(base, engine_policy=policy)
    for mode in args.modes.split(","):
        config = base
        cluster = w.cluster
        if mode == "none":  # the same nodes with no levels: the engine knows no racks
            cluster = Cluster(tuple(replace(n, labels=()) for n in w.cluster.nodes))
        else:
            config = replace(base, gang_level="rack", gang_level_required=mode == "require")
        started = time.perf_counter()
        result = simulate(w.jobs, cluster, w.teams, "gpuqueue", config)
        wall = time.perf_counter() - started
        # Each start of a job: the racks of its segments that began at that time.
        racks: dict[tuple[int, float], set[str]] = defaultdict(set)
        for seg in result.segments:
            racks[(seg.job_id, seg.start)].add(rack_of[seg.node])
        by_job: dict[int, list[set[str]]] = defaultdict(list)
        for (job_id, _), found in racks.items():
            by_job[job_id].append(found)
        gangs = [j for j in w.jobs if j.workers > 1]
        could = [j for j in gangs if j.workers * j.gpus_per_worker <= smallest_rack]
        in_one = [j for j in could if by_job[j.id] and all(len(r) == 1 for r in by_job[j.id])]
        summary = result.summary
        why: dict[str, int] = {}
        if args.why:
            why = topology_why.causes([j for j in could if j not in in_one], racks)
        print(
            json.dumps(
                {
                    "mode": mode,
                    "patience_s": config.engine_policy.topology_patience_seconds,
                    "reserve_s": config.engine_policy.topology_reserve_seconds,
                    "split_cost": config.engine_policy.topology_split_cost,
                    "cluster": args.cluster,
                    "cycle_interval_s": config.cycle_interval,
                    "load": round(w.offered_load, 3),
                    "delay_mean_h": round(float(summary["delay_mean_s"]) / 3600, 3),  # type: ignore[arg-type]
                    "delay_max_h": round(float(summary["delay_max_s"]) / 3600, 3),  # type: ignore[arg-type]
                    # Every wait of a job, requeues included: a gang that starts and is
                    # reclaimed at once has a short delay but a long wait.
                    "wait_mean_h": round(float(summary["wait_mean_s"]) / 3600, 3),  # type: ignore[arg-type]
                    "wait_max_h": round(max(r.waited for r in result.runs) / 3600, 3),
                    "gangs": len(gangs),
                    "could_fit_one_rack": len(could),
                    "placed_in_one_rack": len(in_one),
                    "share_in_one_rack": round(len(in_one) / len(could), 4) if could else None,
                    "anomalies": result.anomalies,
                    "wall_s": round(wall, 1),
                    **({"split_because": why} if args.why else {}),
                    **({"worst": _worst(result.runs, args.worst)} if args.worst else {}),
                }
            ),
            flush=True,
        )


def _worst(runs: list[JobRun], n: int) -> list[dict[str, object]]:
    """The `n` longest first waits: job, team, shape, submission, delay, first start and end
    (hours) and preemptions (a gang that starts and is reclaimed at once counts a short
    delay: its end says when its work was done)."""
    waited = [
        (r.first_start - r.job.submitted_at, r.first_start, r)
        for r in runs
        if r.first_start is not None
    ]
    waited.sort(key=lambda t: -t[0])
    return [
        {
            "job": r.job.id,
            "team": r.job.team,
            "workers": r.job.workers,
            "gpus_per_worker": r.job.gpus_per_worker,
            "submitted_h": round(r.job.submitted_at / 3600, 1),
            "delay_h": round(delay / 3600, 1),
            "first_start_h": round(first / 3600, 1),
            "finished_h": None if r.finished_at is None else round(r.finished_at / 3600, 1),
            "preemptions": r.preemptions,
        }
        for delay, first, r in waited[:n]
    ]


if __name__ == "__main__":
    main()
