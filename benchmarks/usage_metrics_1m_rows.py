"""The usage ledger's /metrics counters over a ledger of a million rows, on the real embedded
PostgreSQL. Prints numbers; not a test.

    .venv/bin/python benchmarks/usage_metrics_1m_rows.py
    .venv/bin/python benchmarks/usage_metrics_1m_rows.py --rows 200000

1. 10 teams × 2 flavors and --rows closed ledger rows (one statement, through the triggers
   that keep UsageTotal), timed: with --without-triggers, the triggers' cost on a bulk write.
2. The scrape as it was (a sum over the whole ledger) against `usage_metrics()` (the triggers'
   totals), the median of --scrapes each, and the minute's fold of the totals' parts.

The target: a scrape's cost does not grow with the ledger (kept forever): the new
scrape stays in single milliseconds whatever --rows is.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cycle_scale import build_world, cluster_file  # noqa: E402
from kube_scale import calibration, start_services  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument(
        "--without-triggers", action="store_true", help="fill with the triggers off (their cost)"
    )
    args = parser.parse_args(argv)
    import os

    with tempfile.TemporaryDirectory(prefix="gq-usage-") as tmp:
        flavors = [("h100", 2, 8), ("a100", 2, 8)]
        os.environ["GPUQUEUE_SIM_CLUSTER"] = str(cluster_file(Path(tmp) / "cluster.yaml", flavors))
        os.environ["GPUQUEUE_CLUSTER_BACKEND"] = "simulated"
        servers = start_services(Path(tmp))
        try:
            return run(args, flavors)
        finally:
            for server in reversed(servers):
                server.stop()


def fill_ledger(rows: int, triggers: bool) -> float:
    """`rows` closed rows spread over the teams and flavors, one per hour of a job; seconds."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from gpuqueue.models import Flavor
    from teams.models import Team

    teams = list(Team.objects.values_list("id", flat=True))
    flavors = list(Flavor.objects.values_list("id", flat=True))
    user = get_user_model().objects.get(username="bench").pk
    started = time.perf_counter()
    with connection.cursor() as cursor:
        if not triggers:
            cursor.execute("ALTER TABLE gpuqueue_usagerecord DISABLE TRIGGER usage_total_change")
        cursor.execute(
            "INSERT INTO gpuqueue_usagerecord (job_id, attempt, hour, team_id, user_id, "
            "flavor_id, gpus, gpu_seconds, outcome, idle_gpu_seconds) "
            "SELECT i / 24, 1, TIMESTAMPTZ '2024-01-01' + (i %% 24) * INTERVAL '1 hour', "
            "(%s::bigint[])[1 + i %% %s], %s, (%s::bigint[])[1 + (i / 7) %% %s], 8, 28800, "
            "CASE WHEN i %% 10 = 0 THEN 'preempted' ELSE 'succeeded' END, 0 "
            "FROM generate_series(0, %s - 1) AS i",
            [teams, len(teams), user, flavors, len(flavors), rows],
        )
    return time.perf_counter() - started


def scrape_as_it_was() -> list[Any]:
    from django.db.models import Q, Sum

    from gpuqueue.models import UsageOutcome, UsageRecord

    return list(
        UsageRecord.objects.values("team__slug", "flavor__name")
        .annotate(
            s=Sum("gpu_seconds"),
            lost=Sum("gpu_seconds", filter=Q(outcome=UsageOutcome.PREEMPTED)),
            idle=Sum("idle_gpu_seconds"),
        )
        .order_by()
    )


def median_seconds(call: Any, times: int) -> float:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent)


def run(args: argparse.Namespace, flavors: list[tuple[str, int, int]]) -> int:
    from gpuqueue.models import UsageTotal
    from gpuqueue.ops.usage_metrics import usage_metrics
    from gpuqueue.services.accounting.usage_ledger import fold_usage_totals

    build_world(flavors, 10, 0, seed=1)
    print(
        f"usage_metrics: {args.rows:,} ledger rows, 10 teams × {len(flavors)} flavors; "
        f"calibration sum(range(10**6)) = {calibration() * 1000:.1f} ms",
        flush=True,
    )
    filled = fill_ledger(args.rows, triggers=not args.without_triggers)
    mode = "off" if args.without_triggers else "on"
    print(f"ledger filled in one statement, triggers {mode}: {filled:.2f} s")
    started = time.perf_counter()
    fold_usage_totals()
    fold = time.perf_counter() - started
    left = UsageTotal.objects.count()
    print(f"fold of {args.rows:,} parts: {fold * 1000:.0f} ms, {left} rows left")
    old = median_seconds(scrape_as_it_was, args.scrapes)
    new = median_seconds(lambda: list(usage_metrics()), args.scrapes)
    print(f"scrape, sum over the ledger: median {old * 1000:.1f} ms")
    print(f"scrape, usage_metrics() from the totals: median {new * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
