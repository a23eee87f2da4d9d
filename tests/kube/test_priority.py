"""On a real control plane: kube-scheduler's own preemption spares a gang's workers, and the
node lifecycle controller evicts them after gpuqueue's node-loss grace, not its default 300 s."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.manifests import ClusterOptions
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
PRIORITY_CLASS = Path(__file__).resolve().parents[2] / "deploy" / "base" / "priorityclass.yaml"


def state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def ensure_priority_class(kube: Kube, body: dict[str, Any]) -> None:
    try:
        client.SchedulingV1Api(kube.api).create_priority_class(body)
    except ApiException as exc:
        if exc.status != 409:
            raise


@pytest.fixture
def installed(kube: Kube) -> Kube:
    """The install's PriorityClass, as deploy/ ships it, and a backend configured as
    from_settings() configures one."""
    ensure_priority_class(kube, yaml.safe_load(PRIORITY_CLASS.read_text()))
    kube.backend.options = ClusterOptions(
        public_url="http://gpuqueue.test",
        priority_class="gpuqueue-workload",
        node_lost_grace_seconds=300,
    )
    return kube


def gang_pods(kube: Kube, job: Job) -> list[dict[str, Any]]:
    return kube.pods(job.team.namespace, selector=f"gpuqueue.dev/job-id={job.pk}")


def test_a_higher_priority_pod_gpuqueue_did_not_make_evicts_no_worker(
    installed: Kube, submit: Any
) -> None:
    kube = installed
    ensure_priority_class(
        kube, {"metadata": {"name": "test-urgent"}, "value": 100000, "description": "test"}
    )
    job = submit(workers=1, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.RUNNING)
    (node,) = job.placement
    (worker,) = gang_pods(kube, job)
    assert worker["spec"]["priorityClassName"] == "gpuqueue-workload"
    assert worker["spec"]["priority"] == 1000000

    # A pod of higher priority than ordinary ones that fits only where the worker runs.
    urgent = {
        "metadata": {"name": "urgent", "namespace": "others"},
        "spec": {
            "priorityClassName": "test-urgent",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
    }
    kube.core.create_namespaced_pod("others", urgent)

    def judged() -> bool:
        pod = kube.core.read_namespaced_pod("urgent", "others")
        return any(
            c.type == "PodScheduled" and c.status == "False" for c in pod.status.conditions or []
        )

    kube.wait(judged)
    time.sleep(3)  # kube-scheduler would have nominated the node and evicted the worker by now
    pod = kube.core.read_namespaced_pod("urgent", "others")
    assert not pod.spec.node_name and not pod.status.nominated_node_name
    (still,) = gang_pods(kube, job)
    assert still["metadata"]["uid"] == worker["metadata"]["uid"]
    assert not still["metadata"].get("deletionTimestamp")
    kube.sync_until(lambda: True)
    assert state(job) == JobState.RUNNING


def test_workers_are_evicted_from_a_lost_node_after_the_node_loss_grace(
    installed: Kube, submit: Any
) -> None:
    """The node lifecycle controller taints a node that is not ready and evicts what does not
    tolerate that taint: gpuqueue's workers tolerate it for the node-loss grace (here 2 s, to
    see the eviction; Kubernetes' default would keep them 300 s)."""
    kube = installed
    kube.backend.options = ClusterOptions(
        public_url="http://gpuqueue.test",
        priority_class="gpuqueue-workload",
        node_lost_grace_seconds=2,
    )
    job = submit(workers=1, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.RUNNING)
    (node,) = job.placement
    (worker,) = gang_pods(kube, job)
    seconds = {
        t["key"]: t.get("tolerationSeconds")
        for t in worker["spec"]["tolerations"]
        if t.get("effect") == "NoExecute"
    }
    assert seconds == {"node.kubernetes.io/not-ready": 2, "node.kubernetes.io/unreachable": 2}
    kube.set_ready(node, False, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    kube.wait(
        lambda: all(
            p["metadata"]["uid"] != worker["metadata"]["uid"]
            or p["metadata"].get("deletionTimestamp")
            for p in gang_pods(kube, job)
        ),
        timeout=60,
    )
