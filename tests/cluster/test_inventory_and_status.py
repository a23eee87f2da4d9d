"""Pure parsing: nodes into GPU inventory, a Job and its pods into a workload phase."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.base import Phase
from gpuqueue.cluster.inventory import inventory, not_ready_since
from gpuqueue.cluster.status import is_permanent_refusal, workload_status
from tests.cluster.conftest import node

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
OURS = {mf.MANAGED_BY: "gpuqueue", mf.LABEL_JOB_ID: "7", mf.LABEL_ATTEMPT: "1"}


def pod(
    on: str,
    gpus: int = 1,
    *,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    index: int = 0,
    state: dict[str, Any] | None = None,
    **status: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"p-{on}-{index}",
            "namespace": "ns",
            "labels": labels or {},
            "annotations": {mf.COMPLETION_INDEX_ANNOTATION: str(index)},
        },
        "spec": {
            "nodeName": on,
            "containers": [
                {"name": "worker", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "worker", "state": state or {"running": {}}}],
            **status,
        },
    }


def test_the_inventory_reads_gpus_mig_slices_shares_labels_taints_cordon_and_readiness() -> None:
    nodes = [
        node("h100-0", 8),
        node(
            "a100-0",
            7,
            product="NVIDIA-A100-SXM4-80GB",
            resource="nvidia.com/mig-1g.10gb",
            labels={"nvidia.com/mig.capable": "true"},
        ),
        node("l4-0", 16, product="NVIDIA-L4", resource="nvidia.com/gpu.shared"),
        node("down-0", 8, ready=False, spec={"unschedulable": True}),
        {"metadata": {"name": "cpu-0"}, "status": {"allocatable": {"cpu": "8"}}},
    ]
    infos = {i.name: i for i in inventory(nodes, [])}
    assert infos["h100-0"].capacity == {"nvidia.com/gpu": 8}
    assert infos["h100-0"].labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert infos["h100-0"].taints == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert infos["a100-0"].capacity == {"nvidia.com/mig-1g.10gb": 7}
    assert infos["l4-0"].capacity == {"nvidia.com/gpu.shared": 16}
    assert not infos["down-0"].ready and infos["down-0"].cordoned
    assert infos["cpu-0"].capacity == {} and not infos["cpu-0"].ready


def test_the_inventory_reads_devices_that_are_not_gpus_for_flavors_fabrics() -> None:
    ib = node("h100-0", 8)
    ib["status"]["allocatable"].update(
        {
            "rdma/rdma_shared_device_a": "1k",
            "nvidia.com/hostdev": "8",
            "hugepages-2Mi": "1Gi",
            "ephemeral-storage": "100Gi",
            "example.com/none": "0",
        }
    )
    infos = {i.name: i for i in inventory([ib, node("h100-1", 8)], [])}
    assert infos["h100-0"].devices == {"nvidia.com/hostdev": 8, "rdma/rdma_shared_device_a": 1000}
    assert infos["h100-0"].capacity == {"nvidia.com/gpu": 8}  # the GPUs alone
    assert infos["h100-1"].devices == {}


def test_gpus_held_by_pods_gpuqueue_did_not_create_are_counted_as_used() -> None:
    pods = [
        pod("h100-0", 2),
        pod("h100-0", 1, index=1),  # someone else's, running
        pod("h100-0", 4, labels=OURS, index=2),  # ours: the engine counts those
        pod("h100-0", 8, phase="Succeeded", index=3),  # finished: holds nothing
        # Labelled as job 7's, but gpuqueue cannot prove it made it: someone else's.
        pod("h100-0", 1, labels=OURS, index=4),
    ]
    ours = {("ns", "p-h100-0-2"): (7, 1)}  # proven (gpuqueue.cluster.proof.Ours.pod_keys)
    (info,) = inventory([node("h100-0", 8)], pods, {(7, 1)}, ours)
    assert info.used_externally == {"nvidia.com/gpu": 4}


def asking(on: str, index: int, cpu: str, memory: str, **spec: Any) -> dict[str, Any]:
    """A pod without GPUs that requests CPU and memory (a DaemonSet's, someone's service)."""
    made = pod(on, 0, index=index)
    made["spec"]["containers"] = [
        {"name": "main", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    ]
    made["spec"].update(spec)
    return made


def test_the_inventory_reads_allocatable_cpu_memory_and_pods_and_what_others_request() -> None:
    h100 = node("h100-0", 8)
    h100["status"]["allocatable"].update({"cpu": "223500m", "memory": "2Ti", "pods": "110"})
    ours = pod("h100-0", 8, labels=OURS, index=3)
    ours["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "96", "memory": "768Gi"}
    pods = [
        asking("h100-0", 0, "250m", "512Mi"),
        # The larger of the containers' sum and the largest init container, plus overhead.
        asking(
            "h100-0",
            1,
            "2",
            "1Gi",
            initContainers=[{"resources": {"requests": {"cpu": "4", "memory": "100Mi"}}}],
            overhead={"cpu": "100m"},
        ),
        asking("h100-0", 2, "8", "8Gi") | {"status": {"phase": "Succeeded"}},  # holds nothing
        ours,  # a live job's worker: its job's requests count it
        pod("h100-0", 1, index=4),  # someone's GPU pod, requesting nothing else
    ]
    ours_keys = {("ns", "p-h100-0-3"): (7, 1)}
    (info,) = inventory([h100], pods, {(7, 1)}, ours_keys)
    assert info.allocatable_cpu_millicores == 223_500
    assert info.allocatable_memory_bytes == 2 << 40
    assert info.allocatable_pods == 110
    assert info.external_cpu_millicores == 250 + 4000 + 100
    assert info.external_memory_bytes == (512 << 20) + (1 << 30)
    assert info.external_pods == 3


def test_hostile_quantities_neither_break_the_inventory_nor_make_room_look_free() -> None:
    """A tenant's pod on a GPU node with requests no apiserver would keep, or one it keeps but
    no database column holds: the node reads full, never freer, and the sync can store it."""
    h100 = node("h100-0", 8)
    h100["status"]["allocatable"].update({"cpu": "224", "memory": "2Ti", "pods": "110"})
    pods = [
        asking("h100-0", 0, "NaN", "Infinity"),
        asking("h100-0", 1, "-5", "-1Gi"),
        *(asking("h100-0", 2 + i, "1e400", "8Ei") for i in range(20)),
    ]
    (info,) = inventory([h100], pods)
    int64 = (1 << 63) - 1
    assert 224_000 <= info.external_cpu_millicores <= int64
    assert (2 << 40) <= info.external_memory_bytes <= int64
    assert info.external_pods == 22


def test_a_node_that_lists_no_cpu_memory_or_pods_limits_none_of_them() -> None:
    bare = node("h100-0", 8)
    bare["status"]["allocatable"] = {"nvidia.com/gpu": "8"}
    (info,) = inventory([bare], [asking("h100-0", 0, "1", "1Gi")])
    assert (info.allocatable_cpu_millicores, info.allocatable_memory_bytes) == (None, None)
    assert info.allocatable_pods is None and info.external_cpu_millicores == 1000


def test_proven_pods_of_a_stopped_attempt_are_draining_for_their_job_not_used_by_others() -> None:
    # Attempt 1 is no longer live: its pod's GPUs come back to the queue. Attempt 2 is live and
    # one of its pods is terminating: held beside its replacement, not coming back.
    terminating = pod("h100-0", 4, labels={**OURS, mf.LABEL_ATTEMPT: "2"})
    terminating["metadata"]["deletionTimestamp"] = "2026-11-22T11:59:00Z"
    earlier = pod("h100-0", 2, labels=OURS, index=1)
    pods = [terminating, earlier, pod("h100-0", 1, index=2)]
    ours = {("ns", "p-h100-0-0"): (7, 2), ("ns", "p-h100-0-1"): (7, 1)}
    (info,) = inventory([node("h100-0", 8)], pods, {(7, 2)}, ours)
    assert info.draining == {7: {"nvidia.com/gpu": 2}}
    assert info.used_externally == {"nvidia.com/gpu": 5}


def test_a_terminating_lookalike_gpuqueue_cannot_prove_it_made_is_used_by_others() -> None:
    # It carries job 7's labels, but a tenant must not make capacity look like it comes back.
    forged = pod("h100-0", 8, labels=OURS)
    forged["metadata"]["deletionTimestamp"] = "2026-11-22T11:59:00Z"
    (info,) = inventory([node("h100-0", 8)], [forged], {(7, 1)}, {})
    assert info.draining == {}
    assert info.used_externally == {"nvidia.com/gpu": 8}


@dataclass(frozen=True)
class Case:
    name: str
    pods: list[dict[str, Any]]
    want: Phase
    job_conditions: list[dict[str, Any]] = field(default_factory=list)
    ready: dict[str, bool] = field(default_factory=lambda: {"n1": True, "n2": True})
    message: str = ""
    exit_code: int | None = None
    start_failure: bool = False


def running(index: int, on: str = "n1", **kw: Any) -> dict[str, Any]:
    return pod(on, labels=OURS, index=index, **kw)


PULL_BACKOFF = {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}
CREATE_ERROR = {"waiting": {"reason": "CreateContainerError", "message": "device busy"}}
CASES = [
    Case("every worker running is a running gang", [running(0), running(1, "n2")], Phase.RUNNING),
    Case(
        "one worker of two is still starting",
        [running(0), running(1, phase="Pending")],
        Phase.STARTING,
        message="1 of 2 workers running",
    ),
    Case(
        "a Complete Job succeeded",
        [],
        Phase.SUCCEEDED,
        job_conditions=[{"type": "Complete", "status": "True"}],
        exit_code=0,
    ),
    Case(
        "an OOMKilled worker fails the job with its exit code and reason",
        [
            running(0),
            running(
                1, phase="Failed", state={"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            ),
        ],
        Phase.FAILED,
        job_conditions=[{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}],
        message="worker 1 exited with code 137 (OOMKilled)",
        exit_code=137,
    ),
    Case(
        "a Job past its deadline fails with the Job's reason",
        [],
        Phase.FAILED,
        job_conditions=[
            {
                "type": "Failed",
                "status": "True",
                "reason": "DeadlineExceeded",
                "message": "Job was active longer than specified deadline",
            }
        ],
        message="DeadlineExceeded: Job was active longer than specified deadline",
    ),
    Case(
        "a worker on a node that is not ready breaks the gang",
        [running(0), running(1, "n2")],
        Phase.LOST,
        ready={"n1": True, "n2": False},
        message="node n2 of worker 1 has not been ready for 360 s",
    ),
    Case(
        "a disrupted worker breaks the gang",
        [
            running(0),
            running(
                1,
                conditions=[
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "DeletionByTaintManager",
                    }
                ],
            ),
        ],
        Phase.LOST,
        message="worker 1 was disrupted (DeletionByTaintManager)",
    ),
    Case(
        "an image pull failing for longer than the timeout is a failed start",
        [running(0, phase="Pending", state=PULL_BACKOFF), running(1)],
        Phase.LOST,
        message="worker 0: image pull failed (ImagePullBackOff): not found",
        start_failure=True,
    ),
    Case(
        "a container the runtime cannot create is a wait within the grace",
        [
            running(0, phase="Pending", state=CREATE_ERROR, startTime="2026-11-22T11:59:00Z"),
            running(1),
        ],
        Phase.STARTING,
        message="worker 0: CreateContainerError: device busy",
    ),
    Case(
        "a container the runtime cannot create past the grace is a failed start",
        [
            running(0, phase="Pending", state=CREATE_ERROR, startTime="2026-11-22T11:57:00Z"),
            running(1),
        ],
        Phase.LOST,
        message="worker 0: CreateContainerError: device busy",
        start_failure=True,
    ),
    Case(
        "a worker evicted for exceeding its own storage limit fails the job",
        [
            running(0),
            running(
                1,
                phase="Failed",
                state={},
                reason="Evicted",
                message="Pod ephemeral local storage usage exceeds the total limit of"
                " containers 1Gi.",
                conditions=[
                    {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
                ],
            ),
        ],
        Phase.FAILED,
        message="worker 1 was evicted for exceeding its own limit: Pod ephemeral local storage"
        " usage exceeds the total limit of containers 1Gi.",
    ),
    Case(
        "a worker evicted because its node ran low loses the gang",
        [
            running(0),
            running(
                1,
                phase="Failed",
                state={},
                reason="Evicted",
                message="The node was low on resource: memory. Threshold quantity: 100Mi.",
            ),
        ],
        Phase.LOST,
        message="worker 1 was refused by n1: Evicted: The node was low on resource: memory."
        " Threshold quantity: 100Mi.",
    ),
    *(
        Case(
            f"a worker its node refuses ({reason}) loses the gang even once the Job failed",
            [
                running(0),
                running(1, "n2", phase="Failed", state={}, reason=reason, message="no device"),
            ],
            Phase.LOST,
            job_conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}],
            message=f"worker 1 was refused by n2: {reason}: no device",
        )
        for reason in (
            "UnexpectedAdmissionError",
            "OutOfnvidia.com/gpu",
            "OutOfcpu",
            "NodeAffinity",
            "Evicted",
        )
    ),
    Case(
        "an invalid image name fails at once",
        [
            running(0, phase="Pending", state={"waiting": {"reason": "InvalidImageName"}}),
            running(1),
        ],
        Phase.FAILED,
        message="worker 0: InvalidImageName",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_workload_phase(case: Case) -> None:
    job = {
        "metadata": {
            "name": "gq-7-1",
            "namespace": "ns",
            "labels": OURS,
            "creationTimestamp": "2026-11-22T11:00:00Z",
        },
        "spec": {"parallelism": 2},
        "status": {"conditions": case.job_conditions},
    }
    nodes = {n: None if ready else NOW - timedelta(minutes=6) for n, ready in case.ready.items()}
    status = workload_status(
        job, case.pods, nodes, NOW, timedelta(minutes=5), node_lost_grace=timedelta(minutes=5)
    )
    assert (status.job_id, status.attempt, status.phase) == (7, 1, case.want)
    assert status.message == case.message
    assert status.exit_code == case.exit_code
    assert status.start_failure == case.start_failure


def test_an_image_pull_within_the_timeout_is_still_starting() -> None:
    job = {
        "metadata": {"name": "gq-7-1", "labels": OURS, "creationTimestamp": "2026-11-22T11:58:00Z"},
        "spec": {"parallelism": 1},
    }
    status = workload_status(
        job,
        [running(0, phase="Pending", state=PULL_BACKOFF)],
        {"n1": None},
        NOW,
        timedelta(minutes=5),
    )
    assert status.phase is Phase.STARTING and "ImagePullBackOff" in status.message


def test_a_node_not_ready_or_unreachable_counts_from_its_ready_condition_s_last_change() -> None:
    since = "2026-11-22T11:00:00Z"
    for status in ("False", "Unknown"):  # NotReady, or unreachable (no kubelet heartbeats)
        lost = node("n1", 8)
        lost["status"]["conditions"] = [
            {"type": "Ready", "status": status, "lastTransitionTime": since}
        ]
        assert not_ready_since(lost) == datetime(2026, 11, 22, 11, 0, tzinfo=UTC)
    assert not_ready_since(node("n1", 8)) is None


@pytest.mark.parametrize(
    "taint",
    [
        "node.kubernetes.io/unschedulable",
        "ToBeDeletedByClusterAutoscaler",
        "karpenter.sh/disrupted",
        "karpenter.sh/disruption",
    ],
)
def test_a_node_an_autoscaler_or_a_drain_is_emptying_counts_as_cordoned(taint: str) -> None:
    """Cordoned in the inventory: no new work, and the gangs on it are preempted."""
    draining = node("n1", 8)
    draining["spec"]["taints"] = [
        *draining["spec"]["taints"],
        {"key": taint, "effect": "NoSchedule"},
    ]
    (info,) = inventory([draining], [])
    assert info.cordoned
    (plain,) = inventory([node("n1", 8)], [])
    assert not plain.cordoned


@pytest.mark.parametrize(
    ("message", "permanent"),
    [
        ('pods "gq-7-1-0-x" is forbidden: exceeded quota: gpus, requested: nvidia.com/gpu=8', True),
        ('pods "gq-7-1-0-x" is forbidden: violates PodSecurity "restricted:latest": ...', True),
        (
            'admission webhook "policy.example.com" denied the request: no GPUs on Fridays',
            True,
        ),
        ('Pod "gq-7-1-0-x" is invalid: spec.containers[0].image: Required value', True),
        (
            'Operation cannot be fulfilled on resourcequotas "gpus": the object has been'
            " modified; please apply your changes to the latest version and try again",
            False,
        ),
        (
            'Internal error occurred: failed calling webhook "policy.example.com": failed to'
            ' call webhook: Post "https://policy.svc:443/validate": context deadline exceeded',
            False,
        ),
        ('pods "gq-7-1-0-x" is forbidden: status unknown for quota: gpus, resource: ...', False),
        ("Timeout: request did not complete within requested timeout", False),
    ],
)
def test_only_a_refusal_the_api_will_repeat_counts_as_a_failed_start(
    message: str, permanent: bool
) -> None:
    assert is_permanent_refusal(message) is permanent


def test_a_released_worker_kube_scheduler_cannot_bind_yet_waits_then_fails_the_start() -> None:
    """kube-scheduler's own preemption of a lower-priority pod, or a brief CPU shortfall, is
    over within the grace; past it the gang is a failed start."""
    job = {
        "metadata": {"name": "gq-7-1", "labels": OURS, "creationTimestamp": "2026-11-22T11:58:00Z"},
        "spec": {"parallelism": 1},
    }

    def released(unschedulable_since: datetime) -> dict[str, Any]:
        worker = running(0, phase="Pending", state={"waiting": {"reason": "ContainerCreating"}})
        worker["spec"] = {"nodeSelector": {"kubernetes.io/hostname": "n1"}}
        worker["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes are available: 1 Insufficient cpu.",
                "lastTransitionTime": unschedulable_since.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        ]
        return worker

    def phase(since: datetime) -> Any:
        return workload_status(job, [released(since)], {"n1": None}, NOW, timedelta(minutes=5))

    waiting = phase(NOW - timedelta(seconds=10))
    assert waiting.phase is Phase.STARTING and not waiting.start_failure
    assert "Insufficient cpu" in waiting.message
    failed = phase(NOW - timedelta(seconds=61))
    assert failed.phase is Phase.LOST and failed.start_failure
    assert failed.message == (
        "worker 0 cannot be bound to its planned node: 0/4 nodes are available: 1 Insufficient cpu."
    )
