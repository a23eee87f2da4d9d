"""The watcher against kmock: list-then-watch, resume from the last resourceVersion, re-list on
410 Gone, and the reconcile it runs at start."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import kmock
from kubernetes import client

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.k8s_watch import ResourceWatch, run_watcher
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.launch import launch_spec
from gpuqueue.models import Job
from tests.cluster.conftest import JOBS, PODS, add_nodes, node


def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    """Poll until `condition()` (threads and sockets are involved); fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def pod(name: str, version: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if version:
        meta["resourceVersion"] = version
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


def test_the_watch_resumes_from_the_last_resource_version_and_relists_on_410(
    emulator: Any, k8s: Any
) -> None:
    core = client.CoreV1Api(emulator.api())
    core.create_namespaced_pod("ns", pod("p1", "5"))
    watches = emulator.kmock[kmock.action.WATCH, PODS]
    # 1st watch: one event, then the server ends the stream (as at its timeoutSeconds).
    watches[:1] << ({"type": "ADDED", "object": pod("p2", "41")},)
    # 2nd watch: version 41 is too old for the server.
    watches[1:2] << (
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "code": 410,
                "reason": "Expired",
                "message": "too old resource version",
            },
        },
    )
    changed = threading.Event()
    watch = ResourceWatch(
        k8s, "pods", k8s.core.list_pod_for_all_namespaces, changed=changed, watch_seconds=30
    )
    watch.start()
    try:
        wait_for(lambda: watch.lists == 2)
        wait_for(lambda: len(emulator.requests("GET", "watch=true")) >= 3)
        # The re-list replaced the copy: p2 was only ever an event, p1 is in the listing.
        assert [p["metadata"]["name"] for p in k8s.store.items("pods")] == ["p1"]
        second = emulator.requests("GET", "watch=true")[1]
        assert second.params["resourceVersion"] == "41"

        core.create_namespaced_pod("ns", pod("p3"))  # a live event on the third watch
        wait_for(lambda: len(k8s.store.items("pods")) == 2)
        assert changed.is_set()
    finally:
        watch.stop()


def test_the_watcher_reconciles_at_start_deleting_orphans_and_relaunching_admitted_jobs(
    emulator: Any, k8s: Any, world: Any, submit: Any, settings: Any
) -> None:
    settings.GPUQUEUE_GANG_READY_TIMEOUT_SECONDS = 3600
    api = emulator.api()
    add_nodes(api, node("h100-0"), node("h100-1"))
    # A Kubernetes Job left behind by a job that finished while the watcher was down...
    finished = submit()
    Job.objects.filter(pk=finished.pk).update(
        state=JobState.CANCELLED, attempts=1, finished_at=datetime.now(UTC)
    )
    finished.refresh_from_db()
    finished.attempts, finished.placement = 1, {"h100-0": 1}
    k8s.launch(launch_spec(finished))
    # ...and a job admitted just before a crash, never launched.
    admitted = submit(workers=2, gpus_per_worker=8)
    Job.objects.filter(pk=admitted.pk).update(
        state=JobState.ADMITTED,
        attempts=1,
        placement={"h100-0": 1, "h100-1": 1},
        admitted_at=datetime.now(UTC),
    )
    passes: list[int] = []

    run_watcher(
        k8s,
        lambda: bool(passes),
        lambda: sync_cluster(k8s),
        sync_seconds=0.01,
        resync_seconds=60,
        watch_seconds=30,
        on_pass=lambda: passes.append(1),
    )

    names = {name for _, name in emulator.objects(JOBS)}
    assert names == {mf.workload_name(admitted.pk, 1)}
    assert not k8s.store.live


def test_the_copy_keeps_listed_and_watched_pods_projected(emulator: Any, k8s: Any) -> None:
    """What the watcher stores, listed or from an event, is cut to projection.POD: the pods'
    images and environment are not kept."""
    core = client.CoreV1Api(emulator.api())
    core.create_namespaced_pod("ns", pod("p1", "5"))
    watch = ResourceWatch(
        k8s,
        "pods",
        k8s.core.list_pod_for_all_namespaces,
        changed=threading.Event(),
        watch_seconds=30,
    )
    watch.start()
    try:
        wait_for(lambda: watch.lists == 1)
        core.create_namespaced_pod("ns", pod("p2"))
        wait_for(lambda: len(k8s.store.items("pods")) == 2)
        kept = k8s.store.items("pods")
        assert [p["metadata"] for p in kept] == [
            {"name": "p1", "namespace": "ns"},
            {"name": "p2", "namespace": "ns"},
        ]
        assert all(p["spec"] == {"containers": [{}]} and "kind" not in p for p in kept)
    finally:
        watch.stop()
    assert k8s.list_raw_pods()["items"] == kept


def test_a_burst_of_events_is_one_pass_not_one_per_event(emulator: Any, k8s: Any) -> None:
    """A gang's pods created, bound and started, a node's pods evicted: dozens of events within
    a moment. The watcher waits a little after the first and runs one pass for them all."""
    core = client.CoreV1Api(emulator.api())
    passes: list[float] = []
    stop = threading.Event()
    watcher = threading.Thread(
        target=run_watcher,
        args=(k8s, stop.is_set, lambda: passes.append(time.monotonic())),
        # A pass at least every second besides (so that the stop below is noticed soon).
        kwargs={"sync_seconds": 1, "resync_seconds": 600, "watch_seconds": 30},
        daemon=True,
    )
    watcher.start()
    try:
        wait_for(lambda: len(passes) == 1)  # the reconcile at start
        wait_for(lambda: len(emulator.requests("GET", "watch=true")) >= 2)
        started = time.monotonic()
        for i in range(30):
            core.create_namespaced_pod("ns", pod(f"burst-{i}"))
        burst = time.monotonic() - started
        wait_for(lambda: len(k8s.store.items("pods")) == 30)
        time.sleep(0.5)  # what a pass per event would still be running
        took = time.monotonic() - started
        # One pass per debounce interval of the burst at most (and one a second), not one per
        # event.
        assert 2 <= len(passes) <= 2 + int(burst / 0.2) + int(took) < 31, (len(passes), burst)
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert not watcher.is_alive()
