"""Users' own labelled Jobs, pure (gpuqueue.cluster.sources and rule 4 of gpuqueue.cluster.proof):
the shape read from the pod template, what cannot be queued and why, the admission patch, and
that only the Job recorded when it was mirrored, and only while not suspended, is a workload."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.base import LaunchSpec
from gpuqueue.cluster.gates import planned_hostname, releases
from gpuqueue.cluster.proof import Record, sort_out
from gpuqueue.cluster.sources import SourceShape, admission_patch, read_job

UID = "5f0c7a1e-0000-4000-8000-000000000001"


def labelled(
    workers: int = 2,
    gpus: str = "8",
    *,
    init_gpus: str = "",
    extra: dict[str, str] | None = None,
    suspend: bool = True,
    attempt: int | None = None,
    uid: str = UID,
    **annotations: str,
) -> dict[str, Any]:
    labels = {"gpuqueue.dev/queue": "team-a", "gpuqueue.dev/flavor": "h100"}
    if attempt is not None:
        labels |= {mf.MANAGED_BY: "gpuqueue", mf.LABEL_JOB_ID: "7", mf.LABEL_ATTEMPT: str(attempt)}
    limits = {"nvidia.com/gpu": gpus, **(extra or {})}
    init = (
        [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": init_gpus}}}] if init_gpus else []
    )
    return {
        "metadata": {
            "name": "finetune",
            "namespace": "team-a",
            "uid": uid,
            "resourceVersion": "42",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "suspend": suspend,
            "parallelism": workers,
            "template": {
                "spec": {
                    "initContainers": init,
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                            "resources": {
                                "limits": limits,
                                "requests": {"cpu": "4", "memory": "16Gi"},
                            },
                        },
                        {
                            "name": "sidecar",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "500m"}},
                        },
                    ],
                    "tolerations": [{"key": "mine", "operator": "Exists"}],
                    "schedulingGates": [{"name": "theirs"}],
                }
            },
        },
    }


def test_the_shape_is_read_from_the_pod_template() -> None:
    shape = read_job(
        labelled(**{"gpuqueue.dev/priority": "-10", "gpuqueue.dev/max-runtime-seconds": "3600"})
    )
    assert shape == SourceShape(
        namespace="team-a",
        name="finetune",
        uid=UID,
        team="team-a",
        workers=2,
        gpus_per_worker=8,
        resource_name="nvidia.com/gpu",
        image="nvcr.io/nvidia/pytorch:24.05-py3",
        flavor="h100",
        priority=-10,
        max_runtime_seconds=3600,
        cpu_millicores=4500,
        memory_mib=16384,
    )


@pytest.mark.parametrize(
    ("job", "why"),
    [
        (labelled(gpus="0"), "its pods ask for no GPU"),
        (labelled(init_gpus="1"), "an init container asks for GPUs"),
        (labelled(extra={"nvidia.com/mig-1g.10gb": "1"}), "GPUs of several resources"),
        (labelled(workers=0), "its parallelism is 0"),
        (labelled(**{"gpuqueue.dev/priority": "high"}), "gpuqueue.dev/priority is 'high'"),
    ],
)
def test_what_cannot_be_queued_says_why(job: dict[str, Any], why: str) -> None:
    found = read_job(job)
    assert isinstance(found, str) and why in found


def spec(attempt: int = 1) -> LaunchSpec:
    return LaunchSpec(
        job_id=7,
        attempt=attempt,
        team="team-a",
        namespace="team-a",
        name="finetune",
        image="",
        command=[],
        env={},
        labels={},
        annotations={},
        workers=2,
        gpus_per_worker=8,
        resource_name="nvidia.com/gpu",
        placement={"h100-0": 1, "h100-1": 1},
        checkpoint_grace_seconds=0,
        max_runtime_seconds=None,
        instance="gpuqueue",
        proof="p",
        source="finetune",
        source_uid=UID,
    )


def test_the_admission_patch_keeps_the_user_s_gates_and_tolerations_and_unsuspends() -> None:
    patch = admission_patch(
        labelled(), spec(), mf.ClusterOptions(), {"h100-0": "h0", "h100-1": "h1"}
    )
    assert patch["metadata"]["resourceVersion"] == "42"  # a compare-and-swap
    assert patch["metadata"]["labels"][mf.LABEL_ATTEMPT] == "1"
    assert patch["spec"]["suspend"] is False
    template = patch["spec"]["template"]
    assert template["metadata"]["labels"][mf.LABEL_JOB_ID] == "7"
    assert json.loads(template["metadata"]["annotations"][mf.PLACEMENT_ANNOTATION]) == [
        ["h0", 1],
        ["h1", 1],
    ]
    assert template["spec"]["schedulingGates"] == [{"name": "theirs"}, {"name": mf.PLACEMENT_GATE}]
    tolerations = template["spec"]["tolerations"]
    assert tolerations[0] == {"key": "mine", "operator": "Exists"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


RECORD = Record(namespace="team-a", proof="p", job_uid=UID, source="finetune")


def pod(name: str, attempt: int = 1, uid: str = UID) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {
                mf.MANAGED_BY: "gpuqueue",
                mf.LABEL_JOB_ID: "7",
                mf.LABEL_ATTEMPT: str(attempt),
            },
            "annotations": {mf.PLACEMENT_ANNOTATION: json.dumps([["h0", 1], ["h1", 1]])},
            "ownerReferences": [{"kind": "Job", "uid": uid, "controller": True}],
        },
        "spec": {"schedulingGates": [{"name": mf.PLACEMENT_GATE}]},
    }


def test_only_the_recorded_job_unsuspended_is_a_workload_with_its_pods() -> None:
    records = {(7, 1): RECORD}
    ours = sort_out([labelled(suspend=False, attempt=1)], [pod("a"), pod("b")], records)
    assert list(ours.jobs) == [(7, 1)] and len(ours.pods[(7, 1)]) == 2
    # Back in the queue (suspended): no workload, though its terminating pods still count.
    ours = sort_out([labelled(suspend=True, attempt=1)], [pod("a")], records)
    assert ours.jobs == {} and ours.pod_keys == {("team-a", "a"): (7, 1)}
    # Another Job under the name, or labelled as the attempt elsewhere: never the job's.
    ours = sort_out(
        [labelled(suspend=False, attempt=1, uid="other")], [pod("a", uid="other")], records
    )
    assert ours.jobs == {} and "uid is not the one recorded" in ours.unproven[0][1]


def test_pods_without_a_completion_index_take_the_slots_in_name_order() -> None:
    assert planned_hostname(pod("b"), 1) == "h1"
    job = labelled(suspend=False, attempt=1)
    gang = [pod("w-b"), pod("w-a")]
    nodes = [
        {
            "metadata": {"name": n, "labels": {"kubernetes.io/hostname": h}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
        for n, h in (("h100-0", "h0"), ("h100-1", "h1"))
    ]
    out, held = releases({(7, 1): job}, {(7, 1): gang}, gang, nodes)
    assert held == {} and {(r.name, r.hostname) for r in out} == {("w-a", "h0"), ("w-b", "h1")}
