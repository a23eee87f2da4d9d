"""The Kubernetes backend's read_log with the official client against kmock: which pod it asks
for (the attempt's pod of that completion index, the newest when one was replaced), with which
options, and what a missing pod or an API in trouble becomes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.base import ClusterError, LogNotFound, LogQuery
from gpuqueue.cluster.kubernetes import KubernetesBackend
from gpuqueue.cluster.proof import Record
from tests.cluster.conftest import Emulator

# What the database recorded when gpuqueue launched attempts 1 and 2 of job 7.
RECORDS = {(7, n): Record("team-a", "", f"secret-uid-{n}", f"job-uid-{n}") for n in (1, 2)}


def labels(attempt: int) -> dict[str, str]:
    return {
        mf.MANAGED_BY: mf.MANAGED_BY_VALUE,
        mf.LABEL_JOB_ID: "7",
        mf.LABEL_ATTEMPT: str(attempt),
    }


@pytest.fixture
def k8s(make_backend: Callable[..., KubernetesBackend]) -> KubernetesBackend:
    """A backend whose database recorded job 7's attempts 1 and 2 (their Jobs' uids)."""
    return make_backend(records=lambda job_ids, instance: RECORDS)


def worker_pod(
    emulator: Emulator,
    name: str,
    index: int,
    created: str,
    attempt: int = 1,
    *,
    forged: bool = False,
) -> None:
    """A worker of the attempt's Job (its controller), or a lookalike (`forged`)."""
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": f"gq-7-{attempt}",
        "uid": f"job-uid-{attempt}",
        "controller": True,
    }
    client.CoreV1Api(emulator.api()).create_namespaced_pod(
        "team-a",
        {
            "metadata": {
                "name": name,
                "namespace": "team-a",
                "labels": labels(attempt),
                "annotations": {mf.COMPLETION_INDEX_ANNOTATION: str(index)},
                "creationTimestamp": created,
                "ownerReferences": [] if forged else [owner],
            },
            "spec": {"containers": [{"name": mf.CONTAINER, "image": "x"}]},
        },
    )


def test_reads_the_newest_pod_of_the_index_with_the_querys_limits(
    emulator: Emulator, k8s: KubernetesBackend
) -> None:
    worker_pod(emulator, "gq-7-1-0-aaaaa", 0, "2026-01-01T00:00:00Z")
    worker_pod(emulator, "gq-7-1-1-old", 1, "2026-01-01T00:00:00Z")
    worker_pod(emulator, "gq-7-1-1-new", 1, "2026-01-01T00:05:00Z")  # the replacement
    worker_pod(emulator, "gq-7-2-1-next", 1, "2026-01-01T00:09:00Z", attempt=2)
    emulator.kmock["get /api/v1/namespaces/team-a/pods/gq-7-1-1-new/log"] << b"step 1\nstep 2\n"

    log = k8s.read_log(7, 1, 1, LogQuery(tail_lines=50, limit_bytes=1000, since_seconds=30))

    assert list(log.lines) == ["step 1", "step 2"] and not log.truncated
    (request,) = emulator.requests("GET", "/log")
    assert request.url.path.endswith("/pods/gq-7-1-1-new/log")
    assert dict(request.url.query) == {
        "container": "worker",
        "tailLines": "50",
        "limitBytes": "1000",
        "sinceSeconds": "30",
    }


def test_a_lookalike_pod_labelled_as_the_worker_is_never_read(
    emulator: Emulator, k8s: KubernetesBackend
) -> None:
    worker_pod(emulator, "gq-7-1-0-aaaaa", 0, "2026-01-01T00:00:00Z")
    # Newer, same labels and index, but not made by the attempt's Job: someone's log to show.
    worker_pod(emulator, "gq-7-1-0-forged", 0, "2026-01-01T00:09:00Z", forged=True)
    emulator.kmock["get /api/v1/namespaces/team-a/pods/gq-7-1-0-aaaaa/log"] << b"real\n"

    assert list(k8s.read_log(7, 1, 0, LogQuery()).lines) == ["real"]
    (request,) = emulator.requests("GET", "/log")
    assert request.url.path.endswith("/pods/gq-7-1-0-aaaaa/log")


def test_a_log_as_long_as_the_byte_limit_is_marked_truncated(
    emulator: Emulator, k8s: KubernetesBackend
) -> None:
    worker_pod(emulator, "gq-7-1-0-aaaaa", 0, "2026-01-01T00:00:00Z")
    emulator.kmock["get /api/v1/namespaces/team-a/pods/gq-7-1-0-aaaaa/log"] << b"0123456789"
    assert k8s.read_log(7, 1, 0, LogQuery(limit_bytes=10)).truncated


def test_no_pod_of_that_index_is_log_not_found(emulator: Emulator, k8s: KubernetesBackend) -> None:
    worker_pod(emulator, "gq-7-1-0-aaaaa", 0, "2026-01-01T00:00:00Z")
    with pytest.raises(LogNotFound, match="job 7 has no worker 3 in attempt 1"):
        k8s.read_log(7, 1, 3, LogQuery())
    assert not emulator.requests("GET", "/log")


def test_an_api_in_trouble_is_one_transient_try_without_backoff(
    emulator: Emulator, k8s: KubernetesBackend
) -> None:
    worker_pod(emulator, "gq-7-1-0-aaaaa", 0, "2026-01-01T00:00:00Z")
    emulator.fail("GET", "/log", 503, "the kubelet is away", times=3)
    with pytest.raises(ClusterError) as raised:
        k8s.read_log(7, 1, 0, LogQuery())
    assert raised.value.transient
    assert len(emulator.requests("GET", "/log")) == 1
    assert k8s.slept == []  # type: ignore[attr-defined]


def test_only_pods_are_read_so_the_web_s_account_needs_nothing_else(
    emulator: Emulator, k8s: KubernetesBackend
) -> None:
    worker_pod(emulator, "gq-7-1-0-aaaaa", 0, "2026-01-01T00:00:00Z")
    emulator.kmock["get /api/v1/namespaces/team-a/pods/gq-7-1-0-aaaaa/log"] << b"x\n"
    k8s.read_log(7, 1, 0, LogQuery())
    reads = {r.url.path for r in emulator.requests("GET")}
    assert reads == {
        "/api/v1/namespaces/team-a/pods",
        "/api/v1/namespaces/team-a/pods/gq-7-1-0-aaaaa/log",
    }


def test_a_container_not_started_is_a_permanent_error_with_the_apis_words(
    emulator: Emulator, k8s: KubernetesBackend
) -> None:
    worker_pod(emulator, "gq-7-1-0-aaaaa", 0, "2026-01-01T00:00:00Z")
    emulator.fail("GET", "/log", 400, 'container "worker" is waiting to start: ContainerCreating')
    with pytest.raises(ClusterError, match="waiting to start") as raised:
        k8s.read_log(7, 1, 0, LogQuery())
    assert not raised.value.transient
