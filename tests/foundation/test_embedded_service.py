"""`make run` for real: the launcher starts PostgreSQL, Redis, Granian, a Celery worker, beat
and the cluster watcher; a job goes through them end to end; a stop leaves no process behind and
a restart loses nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuqueue.ops.embedded import start_postgres, start_redis
from tests.foundation.running_service import Service

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_embedded_servers_start_keep_data_and_stop(tmp_path: Path) -> None:
    import psycopg

    pg = start_postgres(tmp_path / "pg")
    pid = pg.server.get_pid()
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (x int)")
        conn.execute("INSERT INTO kept VALUES (42)")
    pg.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    pg = start_postgres(tmp_path / "pg")
    with psycopg.connect(pg.url) as conn:
        assert conn.execute("SELECT x FROM kept").fetchone() == (42,)
    pg.stop()

    redis = start_redis(tmp_path / "redis")
    import redis as redis_py

    client = redis_py.Redis.from_url(redis.url)
    assert client.ping()
    client.close()
    redis.stop()
    assert redis.process.poll() is not None


@pytest.fixture
def service() -> Iterator[Service]:
    svc = Service()
    yield svc
    svc.close()


def job_body(duration: int, workers: int = 2) -> dict[str, Any]:
    return {
        "team": "team-a",
        "flavor": "h100",
        "name": "e2e",
        "image": "ghcr.io/acme/train:1",
        "workers": workers,
        "gpus_per_worker": 1,
        "annotations": {"gpuqueue.dev/sim-duration-seconds": str(duration)},
    }


def test_make_run_serves_a_job_end_to_end_and_survives_a_restart(service: Service) -> None:
    service.start()
    token = service.token("alice")

    # 1. A 2-worker job goes PENDING -> ADMITTED -> RUNNING -> SUCCEEDED, each step an event.
    job = service.api("POST", "/api/v1/jobs/", token, job_body(duration=2))
    assert job["state"] == "PENDING"
    done = service.wait_for(token, job["id"], "SUCCEEDED")
    assert sum(done["placement"].values()) == 2
    assert service.events(job["id"]) == ["PENDING", "ADMITTED", "RUNNING", "SUCCEEDED"]

    # The admission cycle's processes yield the CPU to the web server (launcher.BACKGROUND).
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert service.process is not None
    nice = {
        p.pid: (p.nice(), " ".join(p.cmdline()))
        for p in psutil.Process(service.process.pid).children(recursive=True)
    }
    celery = {n for n, cmd in nice.values() if "celery" in cmd}
    granian = {n for n, cmd in nice.values() if "granian" in cmd}
    # (19 is the lowest priority there is: a test run already that nice cannot go lower.)
    assert celery == {min(own + 5, 19)} and granian == {own}, nice
    # Started by root, no process of the service runs as root (PostgreSQL, not a child of the
    # launcher, runs as a system user of its own).
    if os.geteuid() == 0:
        owners = {
            " ".join(p.cmdline()): p.uids().effective
            for p in psutil.Process(service.process.pid).children(recursive=True)
        }
        assert owners and 0 not in owners.values(), owners

    # 2. A cancel works.
    long = service.api("POST", "/api/v1/jobs/", token, job_body(duration=600, workers=1))
    service.wait_for(token, long["id"], "RUNNING")
    assert service.api("POST", f"/api/v1/jobs/{long['id']}/cancel/", token)["state"] == "CANCELLED"
    assert service.events(long["id"])[-1] == "CANCELLED"

    # 3. Stop with a job running: everything stops, nothing is left behind.
    running = service.api("POST", "/api/v1/jobs/", token, job_body(duration=8))
    service.wait_for(token, running["id"], "RUNNING")
    # Non-preemptible beyond team-a's guarantee of 24 H100s: it stays queued.
    beyond_guarantee = {"workers": 4, "gpus_per_worker": 8, "preemptible": False}
    queued = service.api(
        "POST", "/api/v1/jobs/", token, {**job_body(duration=1), **beyond_guarantee}
    )
    assert service.stop() == 0
    assert service.leftovers() == []

    # 4. Start again: the running job is followed to completion, the queued one is still there.
    service.start()
    token = service.token("alice")
    finished = service.wait_for(token, running["id"], "SUCCEEDED", timeout=60)
    assert finished["attempts"] == 1  # found again, not launched twice
    assert service.api("GET", f"/api/v1/jobs/{queued['id']}/", token)["state"] == "PENDING"
    assert service.events(running["id"]) == ["PENDING", "ADMITTED", "RUNNING", "SUCCEEDED"]
    assert service.stop() == 0
    assert service.leftovers() == []
