"""`gpuqueue usage`: GPU-hours from the ledger (GET /api/v1/usage/), like Slurm's `sreport`.

gpuqueue usage --since 2026-11-01 --by week
gpuqueue usage --team vision --by month --csv > vision.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable
from typing import Any

from gpuqueue.client.api import Client
from gpuqueue.core.csv_cells import USAGE_CSV_COLUMNS as COLUMNS
from gpuqueue.core.csv_cells import as_csv_cell


def add_parser(sub: Any, client: Callable[[argparse.Namespace], Client]) -> None:
    p = sub.add_parser(
        "usage", help="GPU-hours held per period, team, user and flavor (sreport-like)"
    )
    p.add_argument("--team")
    p.add_argument("--user")
    p.add_argument("--flavor")
    p.add_argument("--since", help="date or ISO time, UTC (default: 30 days ago)")
    p.add_argument("--until", help="excluded (default: now)")
    p.add_argument("--by", choices=("day", "week", "month"), default="day")
    p.add_argument("--csv", action="store_true", help="CSV on standard output")
    p.set_defaults(handler=lambda args: cmd_usage(args, client(args)))


def cmd_usage(args: argparse.Namespace, client: Client) -> int:
    query = {k: getattr(args, k) for k in ("team", "user", "flavor", "since", "until", "by")}
    _, report = client.request("GET", "/api/v1/usage/", query=query, retry=True)
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(COLUMNS)
        for row in report["rows"]:
            writer.writerow([as_csv_cell(row[c]) for c in COLUMNS])
    else:
        print(render(report))
    return 0


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def render(report: dict[str, Any]) -> str:
    """A table per period, team, user and flavor, then the teams against their guarantee."""
    lines = [
        f"GPU-hours {report['since'][:16]} to {report['until'][:16]} UTC, by {report['by']}",
        f"{'PERIOD':10}  {'TEAM':12}  {'USER':12}  {'FLAVOR':8}  {'GPU-H':>9}  "
        f"{'PREEMPTED':>9}  {'USED':>9}  {'IDLE':>9}  JOBS",
    ]
    for r in report["rows"]:
        lines.append(
            f"{r['period']:10}  {r['team']:12}  {r['user']:12}  {r['flavor']:8}  "
            f"{_hours(r['gpu_hours']):>9}  {_hours(r['preempted_gpu_hours']):>9}  "
            f"{_hours(r['used_gpu_hours']):>9}  {_hours(r['idle_gpu_hours']):>9}  {r['jobs']}"
        )
    lines.append(
        f"total {_hours(report['gpu_hours'])} GPU-hours, "
        f"{_hours(report['preempted_gpu_hours'])} lost to preemption"
    )
    if report["teams"]:
        lines += ["", f"{'TEAM':12}  {'FLAVOR':8}  {'GPU-H':>9}  {'GUARANTEE':>9}  {'%':>5}"]
        for t in report["teams"]:
            share = t["percent_of_guarantee"]
            lines.append(
                f"{t['team']:12}  {t['flavor']:8}  {_hours(t['gpu_hours']):>9}  "
                f"{_hours(t['guarantee_gpu_hours']):>9}  "
                f"{'-' if share is None else f'{share:.0f}':>5}"
            )
    return "\n".join(lines)
