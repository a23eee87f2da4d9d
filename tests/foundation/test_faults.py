"""Faults against the real `make run`: while submitters post jobs and retry each with its own
Idempotency-Key until it is acknowledged (as a pipeline does), each kind of process is killed
with SIGKILL in turn, then the whole service is stopped with SIGTERM and started again.

After each fault the service must be back by itself (a new submission acknowledged and the
killed kind running again) within 30 s; at the end no acknowledged submission is lost or
duplicated, no node holds more GPUs than it has, no team more than its limit, and every job's
events are a path of the state machine. `-s` prints the table of the closing note.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil
import pytest

from gpuqueue.core.states import HOLDING, TRANSITIONS, JobState
from tests.foundation.running_service import Service

pytestmark = pytest.mark.slow
RECOVERY_SECONDS = 30.0


@dataclass
class Submitters:
    """Threads that submit short jobs, each retried with the same key until acknowledged."""

    service: Service
    token: str
    threads: int = 3
    acked: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self.workers = [
            threading.Thread(target=self._run, daemon=True) for _ in range(self.threads)
        ]
        for worker in self.workers:
            worker.start()

    def finish(self) -> None:
        self.stop.set()
        for worker in self.workers:
            worker.join(60)

    def submit(self, key: str, deadline: float) -> int | None:
        body = {
            "team": "team-a",
            "flavor": "h100",
            "name": "fault",
            "image": "ghcr.io/acme/train:1",
            "annotations": {"gpuqueue.dev/sim-duration-seconds": "3"},
        }
        while time.monotonic() < deadline:
            request = urllib.request.Request(
                f"{self.service.url}/api/v1/jobs/",
                method="POST",
                data=json.dumps(body).encode(),
                headers={
                    "Authorization": f"Bearer {self.token}",
                    "Content-Type": "application/json",
                    "Idempotency-Key": key,
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return int(json.loads(response.read())["id"])
            except urllib.error.HTTPError as exc:
                if exc.code < 500 and exc.code != 429:
                    self.refused.append(f"{exc.code}: {exc.read()[:200]!r}")
                    return None
            except OSError:
                pass  # connection refused or reset: the web server is restarting
            time.sleep(0.3)
        return None

    def _run(self) -> None:
        while not self.stop.is_set():
            key = uuid.uuid4().hex
            # Once begun, a submission is retried until acknowledged, even after stop().
            job_id = self.submit(key, time.monotonic() + 120)
            if job_id is not None:
                self.acked[key] = job_id
            time.sleep(0.2)


def launcher_child(service: Service, needle: str) -> psutil.Process | None:
    assert service.process is not None
    for child in psutil.Process(service.process.pid).children():
        try:
            if needle in " ".join(child.cmdline()):
                return child
        except psutil.Error:  # exited, not yet reaped by the launcher
            continue
    return None


def web_worker(service: Service) -> psutil.Process | None:
    server = launcher_child(service, "granian")
    workers = server.children() if server is not None else []
    return workers[0] if workers else None


def postmaster(service: Service) -> psutil.Process | None:
    pid_file = service.data_dir / "postgres" / "postmaster.pid"
    try:
        return psutil.Process(int(pid_file.read_text().split()[0]))
    except (OSError, ValueError, psutil.NoSuchProcess):
        return None


FAULTS: dict[str, Callable[[Service], psutil.Process | None]] = {
    # First, while a preemption is in flight (its checkpoint takes the simulated 20 s).
    "celery worker": lambda s: launcher_child(s, " worker"),
    "web worker": web_worker,
    "celery beat": lambda s: launcher_child(s, " beat"),
    "cluster watcher": lambda s: launcher_child(s, "watch_cluster"),
    "redis": lambda s: launcher_child(s, "redis-server"),
    "postgresql": postmaster,
}


@pytest.fixture
def service() -> Iterator[Service]:
    svc = Service(prepared=True)
    svc.env.update(
        GPUQUEUE_WEB_WORKERS="2",
        GPUQUEUE_API_RATE="100000/min",
        GPUQUEUE_MIN_RUNTIME_SECONDS="0",
        GPUQUEUE_SIM_CHECKPOINT_SECONDS="20",
    )
    yield svc
    svc.close()


def recover(service: Service, submitters: Submitters, find: Callable[..., Any], old: int) -> float:
    """Seconds until a new submission is acknowledged and the killed kind runs again."""
    started = time.monotonic()
    assert submitters.submit(uuid.uuid4().hex, started + 60) is not None, service.read_log()
    while time.monotonic() - started < 60:
        proc = find(service)
        if proc is not None and proc.pid != old and proc.status() != psutil.STATUS_ZOMBIE:
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"not restarted within 60 s:\n{service.read_log()}")


def test_no_acknowledged_submission_is_lost_or_doubled_whatever_process_dies(
    service: Service,
) -> None:
    service.start()
    token = service.token("alice")
    hogs, urgent = start_a_preemption(service, token)
    submitters = Submitters(service, token)
    submitters.start()
    rows = []
    for fault, find in FAULTS.items():
        victim = find(service)
        assert victim is not None, f"no {fault} to kill:\n{service.read_log()}"
        before = len(submitters.acked)
        victim.kill()
        seconds = recover(service, submitters, find, victim.pid)
        time.sleep(2)  # let the submissions in flight through the fault finish
        rows.append((fault, len(submitters.acked) - before, seconds))
    before = len(submitters.acked)
    service.stop()
    service.start()
    rows.append(("SIGTERM, then start", len(submitters.acked) - before, 0.0))
    time.sleep(3)
    submitters.finish()
    time.sleep(5)  # the last admissions and syncs

    stored = stored_jobs(service)
    lost = [k for k, job_id in submitters.acked.items() if stored.get(k) != job_id]
    duplicates = duplicate_keys(service)
    print("\n| fault | acknowledged meanwhile | back after |")
    print("| --- | --- | --- |")
    for fault, acknowledged, seconds in rows:
        print(f"| {fault} | {acknowledged} | {seconds:.1f} s |")
    print(
        f"acknowledged {len(submitters.acked)}, stored {len(stored)}, lost {len(lost)}, "
        f"duplicates {len(duplicates)}"
    )
    assert not submitters.refused
    assert not lost and not duplicates
    assert all(seconds <= RECOVERY_SECONDS for _, _, seconds in rows), rows
    assert_invariants(service)
    # The preemption that a fault interrupted went through: checkpointed, requeued, replaced.
    preempted = [job_id for job_id in hogs if "PREEMPTING" in service.events(job_id)]
    assert preempted and service.events(preempted[0])[-1] == "PENDING"
    assert "RUNNING" in service.events(urgent)


def start_a_preemption(service: Service, token: str) -> tuple[list[int], int]:
    """team-a's eight long jobs fill every H100 (its limit); a job of higher priority then
    preempts one of them, whose checkpoint is under way when the first fault strikes."""
    long_job = {
        "team": "team-a",
        "flavor": "h100",
        "image": "ghcr.io/acme/train:1",
        "gpus_per_worker": 8,
        "checkpoint_grace_seconds": 120,
        "annotations": {"gpuqueue.dev/sim-duration-seconds": "3600"},
    }
    hogs = [service.api("POST", "/api/v1/jobs/", token, {**long_job, "name": f"hog-{i}"})["id"]
            for i in range(8)]  # fmt: skip
    for job_id in hogs:
        service.wait_for(token, job_id, "RUNNING")
    urgent = service.api("POST", "/api/v1/jobs/", token, {**long_job, "priority": 10})["id"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = [service.api("GET", f"/api/v1/jobs/{j}/", token)["state"] for j in hogs]
        if "PREEMPTING" in states:
            return hogs, urgent
        time.sleep(0.3)
    raise AssertionError(f"no preemption started:\n{service.read_log()}")


def query(service: Service, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    url = f"postgresql://postgres:@/postgres?host={service.data_dir / 'postgres'}"
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def stored_jobs(service: Service) -> dict[str, int]:
    rows = query(
        service, "SELECT idempotency_key, id FROM gpuqueue_job WHERE idempotency_key IS NOT NULL"
    )
    return {key: job_id for key, job_id in rows}


def duplicate_keys(service: Service) -> list[str]:
    rows = query(
        service,
        "SELECT idempotency_key FROM gpuqueue_job WHERE idempotency_key IS NOT NULL "
        "GROUP BY user_id, idempotency_key HAVING count(*) > 1",
    )
    return [r[0] for r in rows]


def assert_invariants(service: Service) -> None:
    holding = ",".join(f"'{s}'" for s in HOLDING)
    jobs = query(
        service,
        "SELECT j.placement, j.gpus_per_worker, j.workers, j.team_id, j.flavor_id "
        f"FROM gpuqueue_job j WHERE j.state IN ({holding})",
    )
    used: dict[str, int] = defaultdict(int)
    per_team: dict[tuple[int, int], int] = defaultdict(int)
    for placement, gpus_per_worker, workers, team, flavor in jobs:
        for node, count in (placement or {}).items():
            used[node] += int(count) * gpus_per_worker
        per_team[(team, flavor)] += workers * gpus_per_worker
    capacity = {
        name: sum(int(v) for k, v in cap.items() if k.endswith("gpu"))
        for name, cap in query(service, "SELECT name, capacity FROM gpuqueue_node")
    }
    assert all(used[node] <= capacity.get(node, 0) for node in used), (used, capacity)
    limits = {
        (team, flavor): limit
        for team, flavor, limit in query(
            service, 'SELECT team_id, flavor_id, "limit" FROM gpuqueue_quota'
        )
    }
    assert all(gpus <= limits.get(key, 0) for key, gpus in per_team.items()), per_team
    paths: dict[int, list[str]] = defaultdict(list)
    for job_id, from_state, to_state in query(
        service, "SELECT job_id, from_state, to_state FROM gpuqueue_jobevent ORDER BY at, id"
    ):
        path = paths[job_id]
        if path and from_state == to_state == path[-1]:
            continue  # a note within a state (a checkpoint acknowledged), not a transition
        previous = path[-1] if path else (from_state or None)
        if previous is not None:
            assert from_state in ("", previous), (job_id, path, from_state)
            assert JobState(to_state) in TRANSITIONS[JobState(previous)], (job_id, path, to_state)
        path.append(to_state)
