"""Fixtures for the dashboard: a world with nodes, jobs and samples; clients per persona; and,
for the browser tests, the real embedded service and a headless Chromium."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.standings import show

PERSONAS = ("alice", "bob", "carol", "root", "anonymous")


def run_on(job: Any, node: str, *, started_ago: timedelta = timedelta(0)) -> None:
    """Admit `job` (all its workers on `node`) and start it, `started_ago` before now, as the
    cycle and the cluster sync would."""
    from django.utils import timezone

    from gpuqueue.core.states import JobState
    from gpuqueue.services.jobs.transitions import transition

    now = timezone.now()
    transition(
        job,
        JobState.ADMITTED,
        reason="fits",
        actor="cycle",
        placement={node: job.workers},
        admitted_at=now,
        attempts=1,
    )
    transition(
        job, JobState.RUNNING, reason="running", actor="cluster", started_at=now - started_ago
    )


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    # The personas are created for every test; PBKDF2 would spend seconds of this shared
    # 2-core machine on hashing their passwords.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def nodes(world: Any) -> list[Any]:
    """4 × 8 H100 (one cordoned, one NotReady) and 2 × 4 L4, as the cluster watcher writes them."""
    from gpuqueue.models import Node

    h100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    l4 = {"nvidia.com/gpu.product": "NVIDIA-L4"}
    rows = [
        Node(name=f"h100-{i}", capacity={"nvidia.com/gpu": 8}, labels=h100) for i in range(4)
    ] + [Node(name=f"l4-{i}", capacity={"nvidia.com/gpu": 4}, labels=l4) for i in range(2)]
    rows[2].cordoned = True
    rows[3].ready = False
    return Node.objects.bulk_create(rows)


@pytest.fixture
def jobs(world: Any, nodes: Any, submit: Any) -> Any:
    """alice: a running 2 × 4 job on h100-0 and a pending one; carol (team-b): a running job
    and a finished one; a pending job of team-a with a reason and an estimated start."""
    from django.utils import timezone

    from gpuqueue.core.states import JobState
    from gpuqueue.models import Job
    from gpuqueue.services.jobs.transitions import transition

    class Jobs:
        pass

    j = Jobs()
    now = timezone.now()
    j.a_running = submit(world.alice, name="a-running", workers=2, gpus_per_worker=4)
    transition(
        j.a_running,
        JobState.ADMITTED,
        reason="fits",
        actor="cycle",
        placement={"h100-0": 2},
        admitted_at=now,
        attempts=1,
    )
    transition(
        j.a_running,
        JobState.RUNNING,
        reason="every worker is running",
        actor="cluster",
        started_at=now,
    )
    j.a_pending = submit(world.alice, name="a-pending", workers=4, gpus_per_worker=8)
    show(
        j.a_pending.pk,
        reason={
            "code": "no_capacity",
            "numbers": {
                "flavor": "h100",
                "workers": 4,
                "gpus_per_worker": 8,
                "workers_fit": 1,
                "free": 8,
            },
        },
        queue_position=1,
        cluster_position=2,
    )
    Job.objects.filter(pk=j.a_pending.pk).update(estimated_start=now + timedelta(minutes=12))
    j.b_running = submit(
        world.carol, team=world.team_b, name="b-running", workers=1, gpus_per_worker=2
    )
    transition(
        j.b_running,
        JobState.ADMITTED,
        reason="fits",
        actor="cycle",
        placement={"h100-1": 1},
        admitted_at=now,
        attempts=1,
    )
    j.b_done = submit(world.carol, team=world.team_b, name="b-done")
    transition(
        j.b_done, JobState.CANCELLED, reason="cancelled", actor="user:carol", finished_at=now
    )
    for name in ("a_running", "a_pending", "b_running", "b_done"):
        setattr(j, name, Job.objects.get(pk=getattr(j, name).pk))
    return j


@pytest.fixture
def samples(jobs: Any) -> None:
    """An hour of utilization samples, one a minute, as the periodic task writes them."""
    from django.utils import timezone

    from gpuqueue.services.accounting.utilization import sample_utilization

    now = timezone.now()
    for minute in range(60, 0, -5):
        sample_utilization(now - timedelta(minutes=minute))


@pytest.fixture
def clients(world: Any, client: Any) -> Any:
    """clients["alice"] … clients["anonymous"]: Django test clients signed in as each persona."""
    from django.test import Client

    out = {}
    for name in PERSONAS:
        c = Client()
        if name != "anonymous":
            c.force_login(getattr(world, name))
        out[name] = c
    return out


# --- The browser tests: the real service and a real headless Chromium ---------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def service() -> Any:
    """`python -m gpuqueue.ops.launcher` on a prepared data folder and a free port: embedded
    PostgreSQL and Redis, Granian, a Celery worker and beat, the simulated cluster, the demo
    teams and users (demo traffic off, so the only jobs are the tests')."""
    from tests.foundation.test_embedded_service import Service

    svc = Service(prepared=True)
    svc.start(timeout=180)
    yield svc
    svc.close_soon()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Headless Chromium through Selenium, with a fresh profile; skipped when not installed
    (scripts/install-test-packages.sh installs Debian's chromium and chromium-driver)."""
    import os

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(
            f"{CHROMIUM} or {CHROMEDRIVER} is missing; run scripts/install-test-packages.sh"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    # The network log (Chromium's DevTools events), for the test that no page asks another host.
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=DriverService(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
