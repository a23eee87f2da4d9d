"""On a real control plane: failures that are the node's or the cluster's, not the job's. A
worker its kubelet refuses requeues the gang as lost; a hold another process read before the gang
started stops nothing; a gang waiting for terminating pods is no failed start."""

from __future__ import annotations

import time
from typing import Any

from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
HOLD = "gpuqueue.test/terminating"


def state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def gang_pods(kube: Kube, job: Job) -> list[dict[str, Any]]:
    return kube.pods(job.team.namespace, selector=f"gpuqueue.dev/job-id={job.pk}")


def test_a_worker_its_kubelet_refuses_requeues_the_gang_as_lost_not_failed(
    kube: Kube, submit: Any
) -> None:
    """A device-plugin restart makes the kubelet refuse a worker (UnexpectedAdmissionError);
    the pod matches no podFailurePolicy rule, so the Job controller fails the Job."""
    job = submit(workers=2, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.RUNNING)
    pod = sorted(gang_pods(kube, job), key=lambda p: p["metadata"]["name"])[1]
    kube.core.patch_namespaced_pod_status(
        pod["metadata"]["name"],
        "team-a",
        {
            "status": {
                "phase": "Failed",
                "reason": "UnexpectedAdmissionError",
                "message": "Allocate failed due to no healthy devices present",
            }
        },
    )
    # The Job controller fails the Job for it; the sync must read that as the node's fault.
    kube.wait(
        lambda: any(
            c["type"] == "Failed" and c["status"] == "True"
            for j in kube.jobs("team-a")
            for c in (j.get("status") or {}).get("conditions") or []
        )
    )
    kube.sync_until(lambda: state(job) != JobState.RUNNING)
    assert job.state == JobState.PENDING, job.message
    assert job.start_failures == 0 and job.not_before is None
    reason = job.events.last().reason
    assert "UnexpectedAdmissionError" in reason and "refused by" in reason
    kube.wait(lambda: not gang_pods(kube, job))
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.RUNNING)
    assert job.attempts == 2


def test_a_hold_read_by_another_process_before_the_gang_started_stops_nothing(
    kube: Kube, submit: Any
) -> None:
    """A second process's backend (a Celery worker's) held a gang on an earlier pass; the
    watcher released it once its node freed, and it runs. The second process's next pass must
    not read its old hold as a failed start and stop the gang."""
    job = submit(workers=2, gpus_per_worker=4, annotations=LONG)  # a gang, gated
    run_cycle(backend=kube.backend)
    job.refresh_from_db()
    (node,) = job.placement
    kube.wait(lambda: len(gang_pods(kube, job)) == 2)
    # Someone takes the planned node before the gang is released: the gang is held.
    kube.external_pod("hog", node, 8)
    kube.wait(
        lambda: bool((kube.core.read_namespaced_pod("hog", "others").spec.node_name or "") == node)
    )
    other = kube.new_backend()
    sync_cluster(other)
    assert other._held  # the hold, kept for its next pass
    kube.core.delete_namespaced_pod("hog", "others", grace_period_seconds=0)
    kube.wait(lambda: not kube.pods("others", selector=""))
    kube.sync_until(lambda: state(job) == JobState.RUNNING)

    sync_cluster(other)
    sync_cluster(kube.backend)
    assert state(job) == JobState.RUNNING and job.start_failures == 0
    assert gang_pods(kube, job) and all(
        not p["metadata"].get("deletionTimestamp") for p in gang_pods(kube, job)
    )


def test_a_gang_whose_planned_node_is_held_only_by_terminating_pods_waits_for_them(
    kube: Kube, submit: Any
) -> None:
    """A victim's pods save their checkpoint for up to its grace: the gang planned onto their
    GPUs waits, and that is no failed start (which would count toward the job's cap)."""
    job = submit(workers=2, gpus_per_worker=4, annotations=LONG)  # a gang, gated
    run_cycle(backend=kube.backend)
    job.refresh_from_db()
    (node,) = job.placement
    kube.wait(lambda: len(gang_pods(kube, job)) == 2)
    # Before the gang is released, a pod on its node that is still terminating (a finalizer
    # keeps it, as a real kubelet keeps a pod through its grace).
    leaving = {
        "metadata": {"name": "leaving", "namespace": "others", "finalizers": [HOLD]},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
            ],
        },
    }
    kube.core.create_namespaced_pod("others", leaving)
    kube.wait(lambda: kube.core.read_namespaced_pod("leaving", "others").spec.node_name == node)
    kube.core.delete_namespaced_pod("leaving", "others")
    try:
        for _ in range(5):
            sync_cluster(kube.backend)
            time.sleep(0.2)
        assert state(job) == JobState.ADMITTED and job.start_failures == 0
        assert all(p["spec"].get("schedulingGates") for p in gang_pods(kube, job))
    finally:
        kube.core.patch_namespaced_pod("leaving", "others", {"metadata": {"finalizers": None}})
    kube.sync_until(lambda: state(job) == JobState.RUNNING)
    assert job.start_failures == 0
