"""The job list with 100,000 jobs, sorted by every column: the dashboard's pages and the API's
cursor pages, on the real embedded PostgreSQL.

    .venv/bin/python benchmarks/job_list_100k.py [--jobs 100000] [--repeat 9] [--explain]

Prints numbers; it is not a timed test. The world is page_render.py's (64 × 8 H100 and more,
three teams, 100,000 jobs over 30 days inserted with bulk_create, two events each).

1. Start a throwaway embedded PostgreSQL and Redis (the API's throttle counts there; its
   rate is raised out of the way) and build the world (page_render.build_world).
2. Time, as a site admin (every job visible) and as a team member (a third of them): the
   dashboard's first page, a filtered page, the first page of each sort order, page 40 of a
   sort, and the home and queues pages; the API's first page of each ordering and a page
   30,000 rows deep reached by following `next` cursors.
3. Print medians and the 95th percentile of `repeat` runs, and the machine's calibration
   (`sum(range(10**6))`); with --explain, PostgreSQL's plan of each sorted first page.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kube_scale import calibration, start_services  # noqa: E402
from page_render import build_world  # noqa: E402

DEEP_ROWS = 30_000  # within the member's third of the jobs


def timed(call: Any, repeat: int) -> tuple[float, float]:
    call()  # warm: connection, templates, caches
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]


def check(response: Any) -> Any:
    assert response.status_code in (200, 286), (response.status_code, response.content[:300])
    return response


def deep_cursor(client: Any, ordering: str) -> tuple[str, int]:
    """The API's `next` link DEEP_ROWS rows in (or the deepest there is, with fewer jobs),
    followed page by page as a pipeline would; and how many rows deep it is."""
    url = f"/api/v1/jobs/?ordering={ordering}&page_size=500"
    depth = 0
    while depth < DEEP_ROWS:
        following = check(client.get(url)).json()["next"]
        if following is None:
            break
        url, depth = following, depth + 500
    return url, depth


def show(who: str, name: str, median: float, p95: float) -> tuple[str, str, float, float]:
    print(f"{who:<11} {name:<44} {median:>10.1f} {p95:>8.1f}", flush=True)
    return who, name, median, p95


def measure(repeat: int, ids: dict[str, int]) -> list[tuple[str, str, float, float]]:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from rest_framework.test import APIClient

    from gpuqueue.core.job_order import SORT_KEYS

    User = get_user_model()
    results = []
    for who, user_id in (("site admin", ids["root"]), ("member", ids["member"])):
        user = User.objects.get(pk=user_id)
        web, api = Client(), APIClient()
        web.force_login(user)
        api.force_authenticate(user)
        pages = [
            ("home: jobs, first page", "/"),
            ("jobs, pending", "/?state=pending"),
            ("jobs, finished, team-a, -waited", "/?state=finished&team=team-a&ordering=-waited"),
            ("jobs by name, page 40", "/?ordering=name&page=40"),
        ]
        pages += [(f"jobs by -{key}", f"/?ordering=-{key}") for key in SORT_KEYS]
        pages += [(f"jobs by {key}", f"/?ordering={key}") for key in ("name", "waited")]
        pages += [("queues", "/queues/")]
        for name, url in pages:
            median, p95 = timed(lambda url=url, c=web: check(c.get(url)), repeat)
            results.append(show(who, f"web  {name}", median, p95))
        api_pages = [
            (f"api  first page, -{key}", f"/api/v1/jobs/?ordering=-{key}") for key in SORT_KEYS
        ]
        api_pages += [("api  first page, pending", "/api/v1/jobs/?state=pending")]
        for ordering in ("-id", "-submitted_at", "team", "-gpu_hours"):
            deep, depth = deep_cursor(api, ordering)
            api_pages.append((f"api  {depth:,} rows deep, {ordering}", deep))
        for name, url in api_pages:
            median, p95 = timed(lambda url=url, c=api: check(c.get(url)), repeat)
            results.append(show(who, name, median, p95))
    return results


def explain(ids: dict[str, int]) -> None:
    """The plan of each sorted first page as the job list runs it (site admin, then member)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from gpuqueue.core.job_order import SORT_KEYS, Ordering
    from gpuqueue.models import Job

    User = get_user_model()
    for user_id in (ids["root"], ids["member"]):
        user = User.objects.get(pk=user_id)
        for key in SORT_KEYS:
            jobs = Job.objects.visible_to(user).select_related("team", "flavor", "user")
            query = Ordering(key, True).page(jobs, timezone.now(), 0, 51)
            plan = query.explain(analyze=True)
            lines = plan.splitlines()
            scans = [line.strip() for line in lines if "Scan on gpuqueue_job" in line]
            scans += [line.strip() for line in lines if "Scan using" in line and "job" in line]
            took = [line.strip() for line in lines if "Execution Time" in line]
            print(f"{user.username} -{key}: {scans[:1]} {took}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--explain", action="store_true", help="print each sort's query plan")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gq-bench-"))
    tmp.chmod(0o755)
    os.environ["GPUQUEUE_API_RATE"] = "1000000/min"
    servers = start_services(tmp)
    try:
        started = time.perf_counter()
        ids = build_world(args.jobs)
        print(f"built {args.jobs:,} jobs in {time.perf_counter() - started:.0f} s")
        print(f"calibration: sum(range(10**6)) best of 5 = {calibration() * 1000:.1f} ms")
        if args.explain:
            explain(ids)
        print(f"\n{'viewer':<11} {'request':<44} {'median ms':>10} {'p95 ms':>8}")
        measure(args.repeat, ids)
        print(f"calibration: sum(range(10**6)) best of 5 = {calibration() * 1000:.1f} ms")
        return 0
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
