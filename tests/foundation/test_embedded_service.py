"""`make run` for real: the launcher starts PostgreSQL, Redis, Granian, a Celery worker, beat
and the cluster watcher; a job goes through them end to end; a stop leaves no process behind and
a restart loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuqueue.ops.embedded import free_port, start_postgres, start_redis

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


class Service:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "GPUQUEUE_DEMO")
        }
        self.env.update(
            GPUQUEUE_DATA_DIR=str(data_dir),
            GPUQUEUE_PORT=str(self.port),
            GPUQUEUE_EMBEDDED_REDIS_PORT=str(free_port()),
            GPUQUEUE_CYCLE_SECONDS="1",
            GPUQUEUE_SYNC_SECONDS="0.5",
            GPUQUEUE_DEMO_JOBS_PER_MINUTE="0",
            GPUQUEUE_WEB_WORKERS="1",
            GPUQUEUE_LOG_LEVEL="WARNING",
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.tree: set[int] = set()

    def start(self, timeout: float = 120) -> None:
        self.log = open(self.data_dir.parent / "launcher.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpuqueue.ops.launcher"],
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.read_log()
            self._remember_tree()
            try:
                urllib.request.urlopen(f"{self.url}/accounts/login/", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(f"service did not answer within {timeout}s:\n{self.read_log()}")

    def read_log(self) -> str:
        return (self.data_dir.parent / "launcher.log").read_text(errors="replace")[-5000:]

    def _remember_tree(self) -> None:
        assert self.process is not None
        try:
            parent = psutil.Process(self.process.pid)
            self.tree |= {p.pid for p in parent.children(recursive=True)}
        except psutil.NoSuchProcess:
            pass

    def stop(self) -> int:
        assert self.process is not None
        self._remember_tree()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(60)
        self.log.close()
        return code

    def leftovers(self) -> list[str]:
        alive = []
        for pid in self.tree:
            try:
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(" ".join(proc.cmdline()))
            except psutil.NoSuchProcess:
                pass
        for proc in psutil.process_iter(["cmdline"]):  # PostgreSQL is not our child as root
            cmdline = " ".join(proc.info["cmdline"] or [])
            if str(self.data_dir) in cmdline and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(cmdline)
        return alive

    def token(self, username: str) -> str:
        env = dict(self.env, GPUQUEUE_EMBEDDED="1")
        out = subprocess.run(
            [sys.executable, "manage.py", "create_api_token", username],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.strip().splitlines()[-1]

    def api(self, method: str, path: str, token: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def wait_for(self, token: str, job_id: int, state: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = self.api("GET", f"/api/v1/jobs/{job_id}/", token)
            if job["state"] == state:
                return job
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} is {job.get('state')}, not {state}\n{self.read_log()}")

    def events(self, job_id: int) -> list[str]:
        import psycopg

        url = f"postgresql://postgres:@/postgres?host={self.data_dir / 'postgres'}"
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT to_state FROM gpuqueue_jobevent WHERE job_id = %s ORDER BY at, id", [job_id]
            ).fetchall()
        return [r[0] for r in rows]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = Service(tmp_path / "data")
    yield svc
    if svc.process is not None and svc.process.poll() is None:
        svc.stop()


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
    assert celery == {own + 5} and granian == {own}, nice

    # 2. A cancel works.
    long = service.api("POST", "/api/v1/jobs/", token, job_body(duration=600, workers=1))
    service.wait_for(token, long["id"], "RUNNING")
    assert service.api("POST", f"/api/v1/jobs/{long['id']}/cancel/", token)["state"] == "CANCELLED"
    assert service.events(long["id"])[-1] == "CANCELLED"

    # 3. Stop with a job running: everything stops, nothing is left behind.
    running = service.api("POST", "/api/v1/jobs/", token, job_body(duration=8))
    service.wait_for(token, running["id"], "RUNNING")
    queued = service.api(
        "POST", "/api/v1/jobs/", token, {**job_body(duration=1), "workers": 9, "gpus_per_worker": 8}
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
