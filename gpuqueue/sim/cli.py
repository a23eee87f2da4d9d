"""`python -m gpuqueue.sim replay|compare|fillup`: trace replays from the shell."""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gpuqueue.sim.fillup import WEIGHTS
from gpuqueue.sim.policies import POLICIES
from gpuqueue.sim.report import PLOTS_MISSING, can_plot, markdown_table, plot_runs
from gpuqueue.sim.simulator import Progress, Result, SimConfig, simulate
from gpuqueue.sim.workload import build_cluster, load_jobs, workload


def _progress(label: str) -> Callable[[Progress], None]:
    def report(p: Progress) -> None:
        share = p.now / p.end if p.end > 0 else 1.0
        print(
            f"[{label}] {share:5.0%} of the submission span, {p.finished:,}/{p.jobs:,} done, "
            f"{p.pending:,} pending, {p.wall_seconds:.1f} s",
            file=sys.stderr,
            flush=True,
        )

    return report


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", required=True, help="Philly CSV or openb pod list")
    parser.add_argument("--format", choices=("philly", "openb"), default="philly")
    parser.add_argument("--nodes", help="openb node list (instead of --cluster/--load)")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument(
        "--quotas",
        default="proportional",
        help="proportional[:GUARANTEED_FRACTION] | FILE.yaml | helios:PATH[:DAY]",
    )
    parser.add_argument("--sample", type=float, help="replay a seeded random fraction of jobs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fractional",
        choices=("skip", "round-up"),
        default="skip",
        help="openb GPU-sharing pods: leave out, or ask for a whole GPU",
    )
    parser.add_argument("--cycle-interval", type=float, default=60.0)
    parser.add_argument("--idle-cycle-interval", type=float, default=600.0)
    parser.add_argument("--checkpoint-grace", type=float, default=60.0)
    parser.add_argument("--checkpoint-interval", type=float, default=1800.0)
    parser.add_argument("--sample-interval", type=float, default=3600.0)
    parser.add_argument(
        "--window",
        type=int,
        default=16,
        help="pending jobs per team shown to the engine; 0 for all",
    )
    parser.add_argument(
        "--forecast-every",
        type=float,
        help="measure the estimated start's honesty every this many seconds (gpuqueue only)",
    )
    parser.add_argument(
        "--gang-level",
        choices=("", "rack", "block"),
        default="",
        help="every multi-node gang prefers one domain of this level of --cluster's racks",
    )
    parser.add_argument("--gang-level-required", action="store_true", help="... and requires it")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _config(args: argparse.Namespace) -> SimConfig:
    return SimConfig(
        cycle_interval=args.cycle_interval,
        idle_cycle_interval=args.idle_cycle_interval,
        checkpoint_grace=args.checkpoint_grace,
        checkpoint_interval=args.checkpoint_interval,
        sample_interval=args.sample_interval,
        window=args.window or None,
        forecast_every=args.forecast_every,
        gang_level=args.gang_level,
        gang_level_required=args.gang_level_required,
    )


def _row(result: Result, load: float) -> dict[str, object]:
    return {"policy": result.policy, "load": load, **result.summary}


def cmd_replay(args: argparse.Namespace) -> int:
    jobs = load_jobs(
        args.trace, args.format, args.gpus_per_node, args.sample, args.seed, args.fractional
    )
    if not jobs:
        raise ValueError(f"{args.trace}: no jobs to replay")
    cluster = build_cluster(jobs, args.cluster, args.nodes, args.load, args.gpus_per_node)
    w = workload(jobs, cluster, args.quotas)
    progress = None if args.quiet else _progress(args.policy)
    result = simulate(w.jobs, w.cluster, w.teams, args.policy, _config(args), progress)
    row = _row(result, w.offered_load)
    if args.out:
        doc = {
            "trace": args.trace,
            # The options as given (not the subcommand's function, whose repr names an
            # address: two runs of the same command write the same file).
            "config": {k: v for k, v in vars(args).items() if k != "run"},
            "offered_load": w.offered_load,
            **result.to_json(),
        }
        Path(args.out).write_text(json.dumps(doc, default=str))
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Every policy at every cluster size; one table, one JSON file and one plot per size."""
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jobs = load_jobs(
        args.trace, args.format, args.gpus_per_node, args.sample, args.seed, args.fractional
    )
    sizes: list[tuple[str, object]] = (
        [("cluster", spec) for spec in args.clusters.split(",")]
        if args.clusters
        else [("load", float(x)) for x in args.loads.split(",")]
    )
    rows: list[dict[str, object]] = []
    plots = can_plot()
    if not plots:
        print(f"[compare] {PLOTS_MISSING}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    for kind, value in sizes:
        cluster = (
            build_cluster(jobs, str(value), None, None, args.gpus_per_node)
            if kind == "cluster"
            else build_cluster(jobs, None, args.nodes, float(value), args.gpus_per_node)  # type: ignore[arg-type]
        )
        w = workload(jobs, cluster, args.quotas)
        results = []
        for policy in args.policies.split(","):
            label = f"{policy} @ {cluster.capacity()} GPUs"
            progress = None if args.quiet else _progress(label)
            result = simulate(w.jobs, w.cluster, w.teams, policy, _config(args), progress)
            results.append(result)
            rows.append(_row(result, w.offered_load))
            print(
                f"[compare] {label}: done in {result.wall_seconds:.1f} s "
                f"({time.perf_counter() - started:.0f} s so far)",
                file=sys.stderr,
                flush=True,
            )
        name = f"gpus-{cluster.capacity()}"
        if plots:
            plot_runs(
                results,
                f"{Path(args.trace).name}: {cluster.capacity()} GPUs, "
                f"offered load {w.offered_load:.0%}",
                out / f"{name}.png",
            )
        (out / f"{name}.json").write_text(json.dumps([r.to_json() for r in results]))
    table = markdown_table(rows)
    (out / "compare.md").write_text(table)
    (out / "compare.json").write_text(json.dumps(rows))
    print(table)
    return 0


def cmd_fillup(args: argparse.Namespace) -> int:
    from gpuqueue.sim.fillup import FGD_SIMULATOR, SAMPLED, fill_up, load_nodes, load_pods

    nodes = load_nodes(args.nodes)
    pods, sharing = load_pods(args.trace, args.fractional)
    fgd: dict[str, list[str]] = {}
    if args.fgd_summary:
        with open(args.fgd_summary, newline="") as f:
            for row in csv.DictReader(f):
                if row["workload"] == Path(args.trace).stem:
                    fgd[row["sc_policy"]] = [
                        row["alloc_pct_at_arrived100_mean"],
                        row["alloc_pct_at_arrived130_mean"],
                        row["frag_amount_pct_of_total_gpus_at_arrived100_median"],
                        row["frag_ratio_pct_at_arrived90_median"],
                    ]
    cpu_only = sum(1 for p in pods if not p.gpu_milli)
    print(
        f"{Path(args.trace).name}: {len(pods):,} pods kept ({sharing:,} GPU-sharing pods "
        f"{args.fractional}, {cpu_only:,} CPU-only); {sum(n.gpus for n in nodes):,} GPUs "
        f"on {len(nodes):,} nodes"
    )
    print(
        "| placement | seeds | alloc % at arrived 100 % | alloc % at arrived 130 % "
        "| frag % of GPUs at 100 % | frag % of idle at 90 % | wall (s) |"
    )
    print("|---|---|---|---|---|---|---|")
    assert 90 in SAMPLED and 100 in SAMPLED
    for strategy in args.policies.split(","):
        runs = [fill_up(pods, nodes, strategy, seed, weights=args.weights) for seed in args.seeds]
        n = len(runs)
        a100 = sum(r.alloc[100] for r in runs) / n
        a130 = sum(r.alloc[130] for r in runs) / n
        frag = sum(r.frag_amount[100] for r in runs) / n
        ratio = sum(r.frag_ratio[90] for r in runs) / n
        wall = sum(r.wall_seconds for r in runs)
        weights = "pods" if strategy == FGD_SIMULATOR else args.weights  # FGD counts pods
        print(
            f"| {strategy}, `{args.fractional}`, {weights} | {n} | {a100:.2f} "
            f"| {a130:.2f} | {frag:.2f} | {ratio:.1f} | {wall:.1f} |"
        )
    for name, (a100s, a130s, frags, ratios) in sorted(fgd.items()):
        print(f"| FGD paper {name} | 10 | {a100s} | {a130s} | {frags} | {ratios} | – |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuqueue.sim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    replay = sub.add_parser("replay", help="one policy on one cluster; prints a JSON summary")
    _common(replay)
    replay.add_argument("--policy", choices=POLICIES, default="gpuqueue")
    replay.add_argument("--cluster", help='N nodes × G GPUs per flavor: "47x8", "h100=8x8,l4=4x4"')
    replay.add_argument("--load", type=float, help="size uniform nodes for this offered load")
    replay.add_argument("--out", help="write the full results (summary, teams, series) as JSON")
    replay.set_defaults(run=cmd_replay)

    compare = sub.add_parser("compare", help="several policies × cluster sizes: table and plots")
    _common(compare)
    compare.add_argument("--policies", default=",".join(POLICIES))
    compare.add_argument("--loads", default="0.5,0.8,1.0,1.2", help="offered loads to size for")
    compare.add_argument("--clusters", help="cluster specs instead of loads, comma-separated")
    compare.add_argument("--out-dir", default="artifacts/sim")
    compare.set_defaults(run=cmd_compare)

    fill = sub.add_parser("fillup", help="openb fill-up beside the FGD paper's allocation ratios")
    fill.add_argument("--trace", required=True, help="openb pod list")
    fill.add_argument("--nodes", required=True, help="openb node list")
    fill.add_argument(
        "--policies",
        default="binpack,fgd",
        help="placement strategies: binpack, spread, fgd; fgd-sim: FGD's own rule (reference)",
    )
    fill.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[42])
    fill.add_argument(
        "--fractional",
        choices=("share", "skip", "round-up"),
        default="share",
        help="GPU-sharing pods: fractions of a GPU, left out, or one whole GPU each",
    )
    fill.add_argument(
        "--weights",
        choices=tuple(WEIGHTS),
        default="root",
        help="the fragmentation workload's pods weighed by the square root of their requests, "
        "by their requests or each as one",
    )
    fill.add_argument("--fgd-summary", help="fgd-simulator-expected-results/summary_derived.csv")
    fill.set_defaults(run=cmd_fillup)

    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (OSError, ValueError) as e:  # a missing or malformed trace, node list or option
        print(f"error: {e}", file=sys.stderr)
        return 2
