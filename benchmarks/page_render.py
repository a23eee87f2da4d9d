"""Server time of every dashboard page with 100,000 jobs in the database.

    .venv/bin/python benchmarks/page_render.py [--jobs 100000] [--repeat 15]

Prints numbers; it is not a timed test. The target is 200 ms of server time per page: the time
Django spends from request to rendered response (middleware, queries, templates), measured
with the test client, so network and browser time are left out.

1. Start a throwaway embedded PostgreSQL (unless DATABASE_URL is set) and migrate.
2. Build a cluster of 64 × 8 H100, 16 × 4 L4 and 7 MIG slices, three teams, a week of
   minute samples, and 100,000 jobs over 30 days (bulk_create): ~450 holding GPUs, 2,000
   pending with reasons, positions and estimated starts, the rest finished; two events each.
3. Render every page (and the partials the pages poll) as a site admin, who sees every job,
   and as a team member; print the median and the 95th percentile of `repeat` runs.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGET_MS = 200.0


def start_database(keep: str | None) -> tuple[object | None, Path]:
    tmp = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="gq-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    tmp.chmod(0o755)
    os.environ["GPUQUEUE_DATA_DIR"] = str(tmp / "data")
    os.environ.setdefault("SECRET_KEY", "benchmark-only")
    os.environ.setdefault("GPUQUEUE_DEMO", "0")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:1/0")  # pages do not use Redis
    server = None
    if "DATABASE_URL" not in os.environ:
        from gpuqueue.ops.embedded import start_postgres

        server = start_postgres(tmp / "pg")
        os.environ["DATABASE_URL"] = server.url  # type: ignore[attr-defined]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuqueue.settings")
    return server, tmp


def build_world(job_count: int) -> dict[str, int]:
    """Step 2; returns ids the pages need."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from gpuqueue.core.states import JobState
    from gpuqueue.models import Flavor, Job, JobEvent, Node, Quota, UtilizationSample
    from gpuqueue.services.jobs.pending import update_pending_rows
    from teams.models import Membership, Role, Team

    rng = random.Random(6)
    User = get_user_model()
    flavors = {
        "h100": Flavor.objects.create(
            name="h100",
            resource_name="nvidia.com/gpu",
            node_selector={"nvidia.com/gpu.product": "H100"},
        ),
        "l4": Flavor.objects.create(
            name="l4",
            resource_name="nvidia.com/gpu",
            node_selector={"nvidia.com/gpu.product": "L4"},
        ),
        "mig": Flavor.objects.create(name="mig-1g-10gb", resource_name="nvidia.com/mig-1g.10gb"),
    }
    nodes = [
        Node(
            name=f"h100-{i:02d}",
            capacity={"nvidia.com/gpu": 8},
            labels={"nvidia.com/gpu.product": "H100"},
        )
        for i in range(64)
    ]
    nodes += [
        Node(
            name=f"l4-{i:02d}",
            capacity={"nvidia.com/gpu": 4},
            labels={"nvidia.com/gpu.product": "L4"},
        )
        for i in range(16)
    ]
    nodes.append(Node(name="a100-mig-0", capacity={"nvidia.com/mig-1g.10gb": 7}))
    nodes[5].cordoned, nodes[9].ready = True, False
    Node.objects.bulk_create(nodes)
    teams = [
        Team.objects.create(slug=s, name=s, namespace=s) for s in ("team-a", "team-b", "infer")
    ]
    for team in teams:
        Quota.objects.create(team=team, flavor=flavors["h100"], guarantee=128, limit=384)
        Quota.objects.create(team=team, flavor=flavors["l4"], guarantee=16, limit=48)
        Quota.objects.create(team=team, flavor=flavors["mig"], guarantee=2, limit=7)
    root = User.objects.create_superuser("root", "root@example.com", "x")
    users = []
    for i in range(30):
        user = User.objects.create_user(f"user{i}", password="x")
        Membership.objects.create(
            user=user, team=teams[i % 3], role=Role.ADMIN if i < 3 else Role.MEMBER
        )
        users.append(user)

    # Holding jobs first, placed on schedulable nodes so that no node is over-full.
    free = {n.name: 8 for n in nodes[:64] if n.ready and not n.cordoned}
    rows: list[Job] = []
    for name in list(free)[:56]:
        for _ in range(rng.choice([6, 7, 8])):
            rows.append(Job(state=JobState.RUNNING, flavor=flavors["h100"], placement={name: 1}))
    for n in nodes[64:80]:
        rows.append(
            Job(
                state=JobState.RUNNING,
                flavor=flavors["l4"],
                placement={n.name: 2},
                gpus_per_worker=2,
            )
        )
    holding = len(rows)
    pending = 2000
    for i in range(pending):
        rows.append(
            Job(
                state=JobState.PENDING,
                flavor=flavors["h100"],
                workers=rng.choice([1, 1, 1, 2, 4]),
                gpus_per_worker=rng.choice([1, 2, 8]),
                estimated_start=timezone.now() + timedelta(minutes=i),
            )
        )
    finals = [JobState.SUCCEEDED] * 8 + [JobState.FAILED, JobState.CANCELLED]
    now = timezone.now()
    while len(rows) < job_count:
        rows.append(
            Job(
                state=rng.choice(finals),
                flavor=flavors[rng.choice(["h100"] * 6 + ["l4", "mig"])],
                finished_at=now,
                attempts=1,
            )
        )
    rng.shuffle(rows)
    for i, job in enumerate(rows):
        user = users[i % len(users)]
        job.user, job.team_id = user, teams[(i % len(users)) % 3].pk
        job.name = f"job-{i}"
        job.image = "ghcr.io/acme/train:1.0"
        job.command = ["python", "train.py"]
    Job.objects.bulk_create(rows, batch_size=1000)  # one statement holds at most 65,535 parameters
    reason = {
        "code": "no_capacity",
        "numbers": {
            "flavor": "h100",
            "workers": 4,
            "gpus_per_worker": 8,
            "workers_fit": 1,
            "free": 12,
        },
    }
    waiting = Job.objects.filter(state=JobState.PENDING).order_by("id").values_list("id", flat=True)
    update_pending_rows([(job_id, reason, i // 3 + 1, i + 1) for i, job_id in enumerate(waiting)])
    with connection.cursor() as cursor:
        # Submissions spread over 30 days in id order, as a real queue fills.
        cursor.execute(
            "UPDATE gpuqueue_job SET submitted_at = now() - (%s - id) * interval '26 seconds'",
            [Job.objects.order_by("-id").values_list("id", flat=True).first()],
        )
    events = []
    for job_id, state in Job.objects.values_list("id", "state").iterator(chunk_size=10000):
        events.append(
            JobEvent(
                job_id=job_id,
                from_state="",
                to_state=JobState.PENDING,
                reason="submitted",
                actor="user:bench",
            )
        )
        if state != JobState.PENDING:
            events.append(
                JobEvent(
                    job_id=job_id,
                    from_state=JobState.PENDING,
                    to_state=state,
                    reason="bench",
                    actor="cycle",
                )
            )
    JobEvent.objects.bulk_create(events, batch_size=10000)

    # A week of samples, one a minute, per flavor for the cluster and each team.
    samples = []
    start = now.replace(second=0, microsecond=0) - timedelta(days=7)
    for minute in range(7 * 24 * 60):
        at = start + timedelta(minutes=minute)
        for flavor, capacity in ((flavors["h100"], 512), (flavors["l4"], 64), (flavors["mig"], 7)):
            allocated = [rng.randrange(capacity // 4) for _ in teams]
            samples.append(
                UtilizationSample(
                    at=at,
                    flavor=flavor,
                    capacity=capacity,
                    allocated=sum(allocated),
                    pending=rng.randrange(40),
                    free=capacity - sum(allocated),
                    waiting_fit=rng.randrange(8),
                )
            )
            samples += [
                UtilizationSample(
                    at=at,
                    flavor=flavor,
                    team=t,
                    capacity=capacity,
                    allocated=a,
                    pending=rng.randrange(10),
                )
                for t, a in zip(teams, allocated, strict=True)
            ]
    UtilizationSample.objects.bulk_create(samples, batch_size=10000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    some_job = Job.objects.filter(team=teams[0]).order_by("-id").first()
    return {
        "root": root.pk,
        "member": users[3].pk,
        "job": some_job.pk,
        "holding": holding,
        "pending": pending,
    }


def existing_world() -> dict[str, int] | None:
    """The ids of a world an earlier run with --keep built, or None."""
    from django.contrib.auth import get_user_model

    from gpuqueue.core.states import HOLDING, JobState
    from gpuqueue.models import Job

    User = get_user_model()
    root = User.objects.filter(username="root").first()
    if root is None:
        return None
    member = User.objects.get(username="user3")
    job = Job.objects.filter(team=member.memberships.first().team).order_by("-id").first()
    return {
        "root": root.pk,
        "member": member.pk,
        "job": job.pk,
        "holding": Job.objects.filter(state__in=HOLDING).count(),
        "pending": Job.objects.filter(state=JobState.PENDING).count(),
    }


def measure(repeat: int, ids: dict[str, int]) -> list[tuple[str, str, float, float, int]]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    User = get_user_model()
    member = User.objects.get(pk=ids["member"])
    team = member.memberships.first().team.slug
    pages = [
        ("jobs", "/", {}),
        ("jobs, pending", "/?state=pending", {}),
        ("jobs, finished, page 40", f"/?team={team}&state=finished&page=40", {}),
        ("jobs, name search", "/?q=job-4242", {}),
        ("jobs (poll)", "/?state=active", {"HTTP_HX_REQUEST": "true"}),
        ("job", f"/jobs/{ids['job']}/", {}),
        ("job (poll)", f"/jobs/{ids['job']}/", {"HTTP_HX_REQUEST": "true"}),
        ("submit", "/jobs/new/?preset=distributed", {}),
        ("queues", "/queues/", {}),
        ("cluster", "/cluster/", {}),
        ("utilization, hour", "/utilization/?window=hour", {}),
        ("utilization, day", "/utilization/?window=day", {}),
        ("utilization, week", "/utilization/?window=week", {}),
        ("teams", "/teams/", {}),
        ("team", f"/teams/{team}/", {}),
        ("tokens", "/tokens/", {}),
    ]
    results = []
    for who, user_id in (("site admin", ids["root"]), ("member", ids["member"])):
        client = Client()
        client.force_login(User.objects.get(pk=user_id))
        for name, url, headers in pages:
            response = client.get(url, **headers)  # warm: connection, templates, caches
            assert response.status_code in (200, 286), (url, response.status_code)
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                client.get(url, **headers)
                times.append((time.perf_counter() - started) * 1000)
            times.sort()
            p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
            results.append((who, name, statistics.median(times), p95, response.status_code))
    return results


def show_queries(ids: dict[str, int]) -> None:
    """Each page once per viewer, with its query count and the queries over 5 ms."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    User = get_user_model()
    for user_id in (ids["root"], ids["member"]):
        client = Client()
        client.force_login(User.objects.get(pk=user_id))
        for url in (
            "/",
            "/?state=finished&page=40&team=team-a",
            "/queues/",
            "/cluster/",
            "/utilization/?window=day",
            "/utilization/?window=week",
        ):
            client.get(url)
            with CaptureQueriesContext(connection) as queries:
                client.get(url)
            print(f"{url}: {len(queries)} queries")
            for q in queries:
                if float(q["time"]) > 0.005:
                    print(f"   {float(q['time']) * 1000:6.1f} ms  {q['sql'][:300]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--keep", metavar="DIR", help="keep the database in DIR and reuse it on the next run"
    )
    parser.add_argument(
        "--queries", action="store_true", help="also print each page's queries that take over 5 ms"
    )
    args = parser.parse_args()
    server, tmp = start_database(args.keep)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        ids = existing_world() if args.keep else None
        if ids is None:
            ids = build_world(args.jobs)
        print(
            f"built {args.jobs:,} jobs ({ids['holding']} holding GPUs, {ids['pending']} "
            f"pending), 2 events each, a week of samples in {time.perf_counter() - started:.0f} s"
        )
        if args.queries:
            show_queries(ids)
        results = measure(args.repeat, ids)
        print(f"\n{'viewer':<11} {'page':<26} {'median ms':>10} {'p95 ms':>8}  status")
        worst = 0.0
        for who, name, median, p95, status in results:
            worst = max(worst, p95)
            flag = "" if p95 <= TARGET_MS else "  over target"
            print(f"{who:<11} {name:<26} {median:>10.1f} {p95:>8.1f}  {status}{flag}")
        print(f"\nslowest p95: {worst:.1f} ms (target {TARGET_MS:.0f} ms of server time per page)")
        return 0
    finally:
        if server is not None:
            server.stop()  # type: ignore[attr-defined]
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
