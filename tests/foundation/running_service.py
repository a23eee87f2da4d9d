"""`python -m gpuqueue.ops.launcher` (what `make run` runs) as a test drives it: on a fresh data
folder and free ports, with its log kept, its process tree remembered and its database read
directly."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from gpuqueue.ops.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
# Left out of a prepared copy: the runtime folder's lock, and Redis's snapshot (a copy starts
# with an empty Redis, as a fresh service does).
_NOT_COPIED = ("run", "redis/dump.rdb")
_prepared: Path | None = None


def prepared_data() -> Path:
    """A data folder that a service has already initialised, migrated, seeded and stopped,
    made once per test run. A copy starts in a third of a fresh start's time: no runtime
    copy, initdb, migration or seeding (the tests of those use a fresh folder)."""
    global _prepared
    if _prepared is None:
        template = Service()
        template.start(timeout=180)
        assert template.stop() == 0, template.read_log()
        for name in _NOT_COPIED:
            path = template.data_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        _prepared = template.data_dir
        atexit.register(shutil.rmtree, template.folder, ignore_errors=True)
    return _prepared


class Service:
    def __init__(self, prepared: bool = False) -> None:
        """`prepared`: start from a copy of `prepared_data()` rather than an empty folder."""
        # A folder of its own that any user may traverse: started by root, the service's
        # processes run as unprivileged users (PostgreSQL's and `gpuqueue`), as in a real
        # installation, and pytest's temporary folders are private to root (and made private
        # again whenever another pytest session starts).
        self.folder = Path(tempfile.mkdtemp(prefix="gq-service-"))
        self.folder.chmod(0o755)
        self.data_dir = self.folder / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "GPUQUEUE_DEMO")
        }
        self.env.update(
            GPUQUEUE_DATA_DIR=str(self.data_dir),
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
        if prepared:
            # cp keeps the owners (PostgreSQL's system user, the service's) that a copy by
            # Python would lose.
            subprocess.run(["cp", "-a", str(prepared_data()), str(self.data_dir)], check=True)

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

    def close(self) -> None:
        """Stop it if it still runs, and remove its folder."""
        if self.process is not None and self.process.poll() is None:
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def close_soon(self) -> None:
        """close() in a thread of its own, for a module's teardown: the next module starts its
        service while this one stops (the interpreter waits for the thread before it exits)."""
        threading.Thread(target=self.close, name=f"close {self.url}").start()

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
