"""The sync pass's gang release (KubernetesBackend.release_gangs) on the watcher's copy: with no
pod behind gpuqueue's placement gate there is nothing to prove or release, so the pass reads
no record and asks the API nothing; a gated pod, whoever made it, is sorted out as before."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuqueue.cluster import manifests as mf
from tests.cluster.conftest import node


def pod(name: str, *, gated: bool, job_id: int = 7) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if gated:
        spec["schedulingGates"] = [{"name": mf.PLACEMENT_GATE}]
    else:
        spec["nodeName"] = "n1"
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {
                mf.MANAGED_BY: mf.MANAGED_BY_VALUE,
                mf.LABEL_JOB_ID: str(job_id),
                mf.LABEL_ATTEMPT: "1",
            },
        },
        "spec": spec,
        "status": {"phase": "Running" if not gated else "Pending"},
    }


def live_copy(k8s: Any, pods: list[dict[str, Any]]) -> None:
    k8s.store.replace("nodes", [node("n1")])
    k8s.store.replace("pods", pods)
    k8s.store.replace("jobs", [])
    k8s.store.live = True


def test_with_no_gated_pod_the_release_reads_nothing(db: Any, emulator: Any, k8s: Any) -> None:
    live_copy(k8s, [pod(f"w-{i}", gated=False) for i in range(3)])
    asked = len(list(emulator.kmock))
    with CaptureQueriesContext(connection) as queries:
        assert k8s.release_gangs() == 0
    assert len(queries) == 0
    assert len(list(emulator.kmock)) == asked


def test_a_gated_pod_is_sorted_out_and_one_nothing_proves_is_never_released(
    db: Any, emulator: Any, k8s: Any
) -> None:
    live_copy(k8s, [pod("w-0", gated=False), pod("w-1", gated=True)])
    with CaptureQueriesContext(connection) as queries:
        assert k8s.release_gangs() == 0  # labelled as job 7's, but no record proves it
    assert any("gpuqueue_workloadrecord" in q["sql"] for q in queries)
    assert emulator.requests("PATCH") == []
