"""Two replicas of the watcher (and of beat) on a real API server: one Lease, one leader.

The electors run with the timings the deployments use (LeaseTiming's defaults); the leader that
is killed runs in a process of its own and gets SIGKILL, as a lost node or an OOM kill would
leave it: no release, its Lease simply stops being renewed.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.lease import Elector, FencedBackend, LeaseTiming
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.management.commands.watch_cluster import Command as WatchCommand
from gpuqueue.models import Job
from tests.kube.conftest import Kube

NAMESPACE = "gpuqueue"
# The longest acceptable handover after the leader dies (lease + retry is 12 s).
HANDOVER_SECONDS = 15.0
LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


@pytest.fixture
def lease_name(kube: Kube) -> Iterator[str]:
    try:
        kube.core.create_namespace({"metadata": {"name": NAMESPACE}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        client.CoordinationV1Api(kube.api).delete_namespaced_lease(name, NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise


def holder(kube: Kube, name: str) -> str | None:
    lease = client.CoordinationV1Api(kube.api).read_namespaced_lease(name, NAMESPACE)
    return lease.spec.holder_identity


def wait_leading(elector: Elector, timeout: float) -> float:
    started = time.monotonic()
    while not elector.leading():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{elector.identity} did not lead within {timeout:.0f} s")
        time.sleep(0.05)
    return time.monotonic() - started


def leader_process(kube: Kube, name: str) -> subprocess.Popen[str]:
    """An elector in a process of its own; it prints "leading" once it holds the Lease."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from tests.kube.controlplane import api_client_for
        from gpuqueue.cluster.lease import Elector
        elector = Elector(api_client_for({str(kube.plane.kubeconfig)!r}),
                          name={name!r}, namespace={NAMESPACE!r}, identity="doomed")
        elector.start()
        while not elector.leading():
            time.sleep(0.05)
        print("leading", flush=True)
        time.sleep(3600)
        """
    )
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)


def test_a_killed_leader_is_replaced_within_15_s(kube: Kube, lease_name: str) -> None:
    doomed = leader_process(kube, lease_name)
    try:
        assert doomed.stdout is not None
        assert doomed.stdout.readline().strip() == "leading"
        other = Elector(kube.api, name=lease_name, namespace=NAMESPACE, identity="other")
        other.start()
        try:
            time.sleep(LeaseTiming().lease_seconds + 1)  # a live leader keeps the Lease
            assert not other.leading() and holder(kube, lease_name) == "doomed"
            killed = time.monotonic()
            doomed.kill()
            doomed.wait()
            wait_leading(other, timeout=HANDOVER_SECONDS)
            handover = time.monotonic() - killed
            print(f"\nhandover after SIGKILL of the leader: {handover:.1f} s")
            assert handover < HANDOVER_SECONDS
            assert holder(kube, lease_name) == "other"
        finally:
            other.stop()
    finally:
        doomed.kill()
        doomed.wait()


def test_a_leader_that_stops_hands_over_at_the_others_next_try(kube: Kube, lease_name: str) -> None:
    first = Elector(kube.api, name=lease_name, namespace=NAMESPACE, identity="first")
    second = Elector(kube.api, name=lease_name, namespace=NAMESPACE, identity="second")
    first.start()
    wait_leading(first, timeout=5)
    second.start()
    try:
        time.sleep(1)
        assert not second.leading()
        stopped = time.monotonic()
        first.stop()  # a rolling update's SIGTERM: the Lease is released
        assert not first.leading()
        wait_leading(second, timeout=HANDOVER_SECONDS)
        handover = time.monotonic() - stopped
        print(f"\nhandover after a clean stop of the leader: {handover:.1f} s")
        assert handover <= LeaseTiming().retry_seconds + 1
    finally:
        second.stop()
    assert holder(kube, lease_name) is None  # released again by the second


def test_two_candidates_starting_together_elect_exactly_one(kube: Kube, lease_name: str) -> None:
    electors = [
        Elector(kube.api, name=lease_name, namespace=NAMESPACE, identity=f"c{i}") for i in range(2)
    ]
    for elector in electors:
        elector.start()
    try:
        deadline = time.monotonic() + 5
        while not any(e.leading() for e in electors) and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(40):  # four renewals: never both
            assert sum(e.leading() for e in electors) == 1
            time.sleep(0.2)
        (leader,) = [e for e in electors if e.leading()]
        assert holder(kube, lease_name) == leader.identity
    finally:
        for elector in electors:
            elector.stop()


def test_a_replica_that_does_not_lead_launches_stops_and_releases_nothing(
    kube: Kube, lease_name: str, submit: Any
) -> None:
    leader = Elector(kube.api, name=lease_name, namespace=NAMESPACE, identity="leader")
    follower = Elector(kube.api, name=lease_name, namespace=NAMESPACE, identity="follower")
    leader.start()
    wait_leading(leader, timeout=5)
    follower.start()
    try:
        as_follower = FencedBackend(kube.backend, follower.leading)
        as_leader = FencedBackend(kube.backend, leader.leading)
        # Launch: the follower's cycle admits (the database decides) but creates no Job.
        job = submit(workers=2, gpus_per_worker=4, annotations=LONG)
        run_cycle(backend=as_follower)
        assert Job.objects.get(pk=job.pk).state == JobState.ADMITTED
        sync_cluster(as_follower)  # its relaunch is fenced too
        assert not kube.jobs("team-a")
        # The leader's pass launches it; the follower's passes leave its gang behind the gate.
        sync_cluster(as_leader)
        kube.wait(lambda: len(kube.pods(selector=f"gpuqueue.dev/job-id={job.pk}")) == 2)
        for _ in range(3):
            sync_cluster(as_follower)
        pods = kube.pods(selector=f"gpuqueue.dev/job-id={job.pk}")
        assert all(p["spec"].get("schedulingGates") for p in pods), "released by a follower"
        kube.sync_until(
            lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING, backend=as_leader
        )
        # Stop: a cancelled job's workload stays until the leader's pass removes it.
        Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
        sync_cluster(as_follower)
        assert kube.jobs("team-a"), "stopped by a follower"
        kube.sync_until(lambda: not kube.jobs("team-a"), backend=as_leader)
    finally:
        follower.stop()
        leader.stop()


def run_beat(kube: Kube, name: str, tmp: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "GPUQUEUE_CLUSTER_BACKEND": "kubernetes",
        "GPUQUEUE_K8S_KUBECONFIG": str(kube.plane.kubeconfig),
        "PYTHONUNBUFFERED": "1",
        # run_beat reads neither; beat retries its broker until stopped, which is all it does here.
        "DATABASE_URL": "postgresql://gpuqueue@127.0.0.1:9/gpuqueue",
        "REDIS_URL": "redis://127.0.0.1:9/0",
        "SECRET_KEY": "test-only-" + uuid.uuid4().hex,
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "run_beat", "--lease-namespace", NAMESPACE]
        + ["--lease-name", name, "--", "--schedule", f"{tmp}/{uuid.uuid4().hex}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )


def test_of_two_beat_replicas_one_runs_beat_and_a_stopped_leader_hands_it_over(
    kube: Kube, lease_name: str, tmp_path: Path
) -> None:
    first = run_beat(kube, lease_name, str(tmp_path))
    second: subprocess.Popen[str] | None = None
    try:
        assert first.stdout is not None
        assert first.stdout.readline().startswith("leading as")
        second = run_beat(kube, lease_name, str(tmp_path))
        time.sleep(LeaseTiming().lease_seconds)
        assert second.poll() is None
        assert second.stdout is not None
        # The second has printed nothing: it follows while the first leads.
        assert not select.select([second.stdout], [], [], 0)[0]
        stopped = time.monotonic()
        first.terminate()  # the kubelet's SIGTERM: beat stopped, then the Lease released
        assert first.wait(timeout=30) == 0
        assert second.stdout.readline().startswith("leading as")
        print(f"\nbeat handed over {time.monotonic() - stopped:.1f} s after SIGTERM")
        assert time.monotonic() - stopped < HANDOVER_SECONDS
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=30)


class Replica:
    """One watcher replica as `watch_cluster --lease-namespace` runs it, in a thread of this
    process: its own elector, its own backend, its own database connection."""

    def __init__(self, kube: Kube, lease: str, identity: str) -> None:
        self.command = WatchCommand()
        self.command.stopping = False
        self.elector = Elector(kube.api, name=lease, namespace=NAMESPACE, identity=identity)
        self.backend = kube.new_backend()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.command.lead(self.elector, self.backend)
        finally:
            connection.close()

    def start(self) -> Replica:
        self.elector.start()
        self.thread.start()
        return self

    def kill(self) -> None:
        """As SIGKILL leaves it: no more renewals, no release, its watcher gone."""
        self.elector._stopping.set()  # noqa: SLF001 - a crash, not a stop
        self.command.stopping = True
        self.thread.join(timeout=30)

    def stop(self) -> None:
        self.command.stopping = True
        self.thread.join(timeout=30)
        self.elector.stop()


def test_killing_the_leading_watcher_hands_over_within_15_s_and_loses_no_gang(
    kube: Kube, lease_name: str, submit: Any, transactional_db: Any
) -> None:
    """Two watcher replicas: the leader launches and releases a gang; killed, the other leads
    within 15 s, keeps that gang running (same pods) and launches the next one."""
    first = Replica(kube, lease_name, "watcher-0").start()
    wait_leading(first.elector, timeout=5)
    second = Replica(kube, lease_name, "watcher-1").start()
    try:
        no_one = FencedBackend(kube.backend, lambda: False)  # the cycle admits, launches nothing
        running = submit(workers=2, gpus_per_worker=4, annotations=LONG)
        run_cycle(backend=no_one)
        kube.wait(lambda: Job.objects.get(pk=running.pk).state == JobState.RUNNING, timeout=60)
        pods = {
            p["metadata"]["uid"] for p in kube.pods(selector=f"gpuqueue.dev/job-id={running.pk}")
        }
        assert not second.elector.leading()

        killed = time.monotonic()
        first.kill()
        wait_leading(second.elector, timeout=HANDOVER_SECONDS)
        handover = time.monotonic() - killed
        print(f"\nwatcher handover after its leader was killed: {handover:.1f} s")
        assert handover < HANDOVER_SECONDS

        after = submit(workers=2, gpus_per_worker=4, annotations=LONG)
        run_cycle(backend=no_one)
        kube.wait(lambda: Job.objects.get(pk=after.pk).state == JobState.RUNNING, timeout=60)
        assert Job.objects.get(pk=running.pk).state == JobState.RUNNING
        still = {
            p["metadata"]["uid"] for p in kube.pods(selector=f"gpuqueue.dev/job-id={running.pk}")
        }
        assert still == pods  # the same pods: nothing stopped, nothing relaunched
    finally:
        second.stop()
        first.kill()
