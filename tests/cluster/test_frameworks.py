"""Users' own PyTorchJobs and RayJobs, pure (gpuqueue.cluster.frameworks, the pod sets of
gpuqueue.cluster.gates and rule 4 of gpuqueue.cluster.proof): the shape read from several pod
templates, what cannot be queued and why, the admission patch, the gate releasing each pod set to
its own part of the plan, and which pods count for the attempt."""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuqueue.cluster import frameworks as fw
from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.base import LaunchSpec
from gpuqueue.cluster.gates import releases
from gpuqueue.cluster.proof import Record, sort_out

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
UID = "5f0c7a1e-0000-4000-8000-000000000002"


def example(name: str, **meta: Any) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    obj["metadata"] |= {"namespace": "team-a", "uid": UID, "resourceVersion": "42", **meta}
    return obj


def pytorchjob() -> dict[str, Any]:
    return example("pytorchjob.yaml")


def rayjob() -> dict[str, Any]:
    return example("rayjob.yaml")


def spec(workers: int = 4, placement: dict[str, int] | None = None) -> LaunchSpec:
    return LaunchSpec(
        job_id=7,
        attempt=1,
        team="team-a",
        namespace="team-a",
        name="pretrain",
        image="",
        command=[],
        env={},
        labels={},
        annotations={},
        workers=workers,
        gpus_per_worker=8,
        resource_name="nvidia.com/gpu",
        placement=placement or {"h100-0": 2, "h100-1": 2},
        checkpoint_grace_seconds=0,
        max_runtime_seconds=None,
        instance="gpuqueue",
        proof="p" * 64,
        source="pretrain",
        source_uid=UID,
        source_kind="PyTorchJob",
    )


def test_a_pytorchjob_is_one_gang_of_its_master_and_workers() -> None:
    shape = fw.read_framework(pytorchjob())
    assert not isinstance(shape, str), shape
    assert (shape.kind, shape.team, shape.flavor) == ("PyTorchJob", "team-a", "h100")
    assert (shape.workers, shape.gpus_per_worker, shape.resource_name) == (4, 8, "nvidia.com/gpu")
    assert shape.max_runtime_seconds == 86400 and shape.uid == UID


def test_a_rayjob_s_gpu_workers_are_the_gang_and_its_head_rides_along() -> None:
    shape = fw.read_framework(rayjob())
    assert not isinstance(shape, str), shape
    assert (shape.kind, shape.workers, shape.gpus_per_worker) == ("RayJob", 2, 8)
    # The GPU pods' CPU and memory, not the head's.
    assert (shape.cpu_millicores, shape.memory_mib) == (8000, 64 * 1024)
    sets = fw.pod_sets(rayjob())
    assert [(s.name, s.count, s.gpus) for s in sets] == [("head", 1, 0), ("gpu", 2, 8)]


def master_with(gpus: int | str) -> dict[str, Any]:
    """The example PyTorchJob (a Master and 3 Workers of 8 GPUs) with its Master's GPUs."""
    obj = pytorchjob()
    [master] = obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    master["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    return obj


def test_pod_sets_of_different_gpus_per_pod_are_one_gang_counted_in_units() -> None:
    shape = fw.read_framework(master_with(2))
    assert not isinstance(shape, str), shape
    # 2 + 3 x 8 = 26 GPUs, in units of 2 (their common divisor): every product is its GPUs.
    assert (shape.workers, shape.gpus_per_worker) == (13, 2)
    assert [(s["name"], s["pods"], s["gpus"]) for s in shape.pod_sets] == [
        ("Master", 1, 2),
        ("Worker", 3, 8),
    ]
    # Pods all alike keep no pod sets.
    assert fw.read_framework(pytorchjob()).pod_sets == ()  # type: ignore[union-attr]


@pytest.mark.parametrize("hostile", ["-1", "1e400", "-8", "nan"])
def test_a_negative_or_endless_gpu_count_gives_nothing_back_and_stops_no_pass(hostile: str) -> None:
    """A PyTorchJob's template is not checked by the API server as a pod is: a Master asking
    -1 GPUs must not make the gang 23 GPUs of 24 (a pod giving one back), nor 1e400 raise in
    the watcher's pass. Such an amount reads as none: the Master rides along, as a CPU-only
    pod set does, and the operator's pod is refused by the API server."""
    shape = fw.read_framework(master_with(hostile))
    assert not isinstance(shape, str), shape
    assert (shape.workers, shape.gpus_per_worker, shape.pod_sets) == (3, 8, ())
    obj = pytorchjob()
    for replica in obj["spec"]["pytorchReplicaSpecs"].values():
        [container] = replica["template"]["spec"]["containers"]
        container["resources"]["requests"] = {"cpu": hostile, "memory": f"{hostile}Gi"}
    shape = fw.read_framework(obj)
    assert not isinstance(shape, str), shape
    assert (shape.cpu_millicores, shape.memory_mib) == (None, None)


def test_admission_sends_each_pod_of_pod_sets_to_its_own_planned_node() -> None:
    """The plan names each pod's node (LaunchSpec.pod_nodes): the Master's 1-GPU pod on a
    busy node, the Workers on theirs; the placement counts units, which say nothing of pods."""
    nodes = ("h100-2", "h100-0", "h100-0", "h100-1")
    admitted = replace(spec(), placement={"h100-0": 16, "h100-1": 8, "h100-2": 1}, pod_nodes=nodes)
    hosts = {"h100-0": "h0", "h100-1": "h1", "h100-2": "h2"}
    patch = fw.admission_patch(master_with(1), admitted, mf.ClusterOptions(), hosts)
    replicas = patch["spec"]["pytorchReplicaSpecs"]
    plan = {
        name: json.loads(
            replicas[name]["template"]["metadata"]["annotations"][mf.PLACEMENT_ANNOTATION]
        )
        for name in ("Master", "Worker")
    }
    assert plan == {"Master": [["h2", 1]], "Worker": [["h0", 2], ["h1", 1]]}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            lambda o: [
                r["template"]["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu")
                for r in o["spec"]["pytorchReplicaSpecs"].values()
            ],
            "its pods ask for no GPU",
        ),
        (
            lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
                initContainers=[{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
            ),
            "an init container of pod set Worker asks for GPUs",
        ),
        (
            lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][
                0
            ]["resources"]["limits"].update({"nvidia.com/mig-1g.10gb": "1"}),
            "pod set Worker asks GPUs of several resources",
        ),
    ],
)
def test_what_gpuqueue_cannot_queue_is_said(change: Any, why: str) -> None:
    obj = pytorchjob()
    change(obj)
    assert isinstance(shape := fw.read_framework(obj), str) and shape.startswith(why), shape


def test_a_rayjob_on_an_existing_or_autoscaling_cluster_is_not_queued() -> None:
    obj = rayjob()
    obj["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    assert "existing RayCluster" in str(fw.read_framework(obj))
    obj = rayjob()
    obj["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    assert "a gang has a fixed size" in str(fw.read_framework(obj))


def test_admission_writes_each_pod_set_s_part_of_the_plan_and_unsuspends() -> None:
    obj = pytorchjob()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulingGates"] = [
        {"name": "theirs"}
    ]
    patch = fw.admission_patch(obj, spec(), mf.ClusterOptions(), {"h100-0": "h0", "h100-1": "h1"})
    assert patch["metadata"]["resourceVersion"] == "42"
    assert patch["metadata"]["labels"][mf.LABEL_JOB_ID] == "7"
    assert patch["metadata"]["annotations"] == {mf.PROOF_ANNOTATION: "p" * 64}
    assert patch["spec"]["runPolicy"]["suspend"] is False
    replicas = patch["spec"]["pytorchReplicaSpecs"]
    master, worker = replicas["Master"]["template"], replicas["Worker"]["template"]
    assert json.loads(master["metadata"]["annotations"][mf.PLACEMENT_ANNOTATION]) == [["h0", 1]]
    assert json.loads(worker["metadata"]["annotations"][mf.PLACEMENT_ANNOTATION]) == [
        ["h0", 1],
        ["h1", 2],
    ]
    assert worker["spec"]["schedulingGates"] == [{"name": "theirs"}, {"name": mf.PLACEMENT_GATE}]
    assert master["metadata"]["labels"][mf.LABEL_ATTEMPT] == "1"
    # The rest of the replica spec is the user's, untouched but for the checkpoint protocol.
    assert replicas["Worker"]["replicas"] == 3 and replicas["Worker"]["restartPolicy"] == "Never"
    [theirs] = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    [ours] = worker["spec"]["containers"]
    assert {k: v for k, v in ours.items() if k not in ("env", "volumeMounts")} == {
        k: v for k, v in theirs.items() if k not in ("env", "volumeMounts")
    }


def test_admission_hands_every_container_the_attempt_s_checkpoint_token_and_annotations() -> None:
    """The workload acknowledges a checkpoint as gpuqueue's own Jobs do: the token from the
    attempt's Secret, its job id and the file of its pod's annotations, in every container of
    every pod set; a variable of the user's under one of those names does not win."""
    obj = pytorchjob()
    [container] = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    container["env"] = [
        {"name": "LR", "value": "3e-4"},
        {"name": "GPUQUEUE_JOB_TOKEN", "value": "forged"},
    ]
    patch = fw.admission_patch(obj, spec(), mf.ClusterOptions(), {"h100-0": "h0", "h100-1": "h1"})
    for replica in ("Master", "Worker"):
        pod = patch["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["GPUQUEUE_JOB_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": mf.token_secret_name(7, 1),
            "key": mf.TOKEN_KEY,
        }
        assert env["GPUQUEUE_JOB_ID"]["value"] == "7"
        assert env["GPUQUEUE_ANNOTATIONS_FILE"]["value"] == mf.ANNOTATIONS_FILE
        [volume] = [v for v in pod["volumes"] if v["name"] == fw.PODINFO_VOLUME]
        assert volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == (
            "metadata.annotations"
        )
        assert {"name": fw.PODINFO_VOLUME, "mountPath": mf.PODINFO_DIR, "readOnly": True} in pod[
            "containers"
        ][0]["volumeMounts"]
    worker = patch["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    names = [e["name"] for e in worker["containers"][0]["env"]]
    assert names.count("GPUQUEUE_JOB_TOKEN") == 1 and names[0] == "LR"
    # Admitted again (a later attempt): written afresh, not added twice.
    again = copy.deepcopy(obj)
    again["spec"]["pytorchReplicaSpecs"] = patch["spec"]["pytorchReplicaSpecs"]
    second = fw.admission_patch(
        again, spec(), mf.ClusterOptions(), {"h100-0": "h0", "h100-1": "h1"}
    )
    pod = second["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert [v["name"] for v in pod["volumes"]].count(fw.PODINFO_VOLUME) == 1
    assert len(pod["containers"][0]["volumeMounts"]) == len(worker["containers"][0]["volumeMounts"])


def test_a_rayjob_s_head_goes_to_its_first_worker_s_node() -> None:
    obj = rayjob()
    patch = fw.admission_patch(obj, spec(2, {"h100-2": 1, "h100-3": 1}), mf.ClusterOptions(), {})
    assert patch["spec"]["suspend"] is False
    cluster = patch["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["metadata"]["annotations"]
    assert json.loads(head[mf.PLACEMENT_ANNOTATION]) == [["h100-2", 1]]
    (group,) = cluster["workerGroupSpecs"]  # the list written back whole
    assert (group["groupName"], group["replicas"], group["maxReplicas"]) == ("gpu", 2, 2)
    plan = json.loads(group["template"]["metadata"]["annotations"][mf.PLACEMENT_ANNOTATION])
    assert plan == [["h100-2", 1], ["h100-3", 1]]
    assert cluster["rayVersion"] == "2.46.0"


def gated_pod(name: str, template: dict[str, Any], owner: dict[str, str]) -> dict[str, Any]:
    pod = copy.deepcopy(template)
    pod["metadata"] |= {
        "name": name,
        "namespace": "team-a",
        "ownerReferences": [{**owner, "controller": True}],
    }
    return pod


def node(name: str) -> dict[str, Any]:
    room = {"nvidia.com/gpu": "32", "cpu": "128", "memory": "1Ti", "pods": "110"}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": room, "capacity": room},
    }


def admitted(obj: dict[str, Any], launch: LaunchSpec) -> dict[str, Any]:
    """The object as the API holds it after the admission patch (a merge patch)."""
    patch = fw.admission_patch(obj, launch, mf.ClusterOptions(), {})
    out = copy.deepcopy(obj)
    out["metadata"]["labels"] |= patch["metadata"]["labels"]
    out["metadata"].setdefault("annotations", {}).update(patch["metadata"]["annotations"])
    out["spec"] |= patch["spec"]
    return out


def test_the_gate_releases_every_pod_set_to_its_own_planned_nodes() -> None:
    launch = spec(4, {"h100-0": 1, "h100-1": 3})
    obj = admitted(pytorchjob(), launch)
    view = fw.job_view(obj)
    owner = {"kind": "PyTorchJob", "uid": UID, "name": "pretrain"}
    replicas = obj["spec"]["pytorchReplicaSpecs"]
    pods = [gated_pod("pretrain-master-0", replicas["Master"]["template"], owner)] + [
        gated_pod(f"pretrain-worker-{i}", replicas["Worker"]["template"], owner) for i in range(3)
    ]
    record = Record(
        "team-a", launch.proof, job_uid=UID, source="pretrain", source_kind="PyTorchJob"
    )
    ours = sort_out([view], pods, {(7, 1): record})
    assert len(ours.pods[(7, 1)]) == 4
    out, held = releases(ours.jobs, ours.pods, pods, [node("h100-0"), node("h100-1")])
    assert held == {}
    assert {r.name: r.hostname for r in out} == {
        "pretrain-master-0": "h100-0",
        "pretrain-worker-0": "h100-1",
        "pretrain-worker-1": "h100-1",
        "pretrain-worker-2": "h100-1",
    }
    # Three of the four pods made: the gang waits for the last one.
    ours = sort_out([view], pods[:3], {(7, 1): record})
    assert releases(ours.jobs, ours.pods, pods[:3], [node("h100-0"), node("h100-1")]) == ([], {})


def test_a_rayjob_s_pods_count_through_the_raycluster_its_status_names() -> None:
    launch = spec(2, {"h100-2": 1, "h100-3": 1})
    obj = admitted(rayjob(), launch)
    obj["status"] = {"rayClusterName": "sweep-abcde", "jobDeploymentStatus": "Running"}
    view = fw.job_view(obj)
    assert view["spec"]["parallelism"] == 3
    cluster = obj["spec"]["rayClusterSpec"]
    mine = {"kind": "RayCluster", "uid": "c1", "name": "sweep-abcde"}
    other = {"kind": "RayCluster", "uid": "c2", "name": "someone-else"}
    pods = [
        gated_pod("sweep-abcde-head-x", cluster["headGroupSpec"]["template"], mine),
        gated_pod("sweep-abcde-gpu-worker-b", cluster["workerGroupSpecs"][0]["template"], mine),
        gated_pod("sweep-abcde-gpu-worker-a", cluster["workerGroupSpecs"][0]["template"], mine),
        gated_pod("forged", cluster["workerGroupSpecs"][0]["template"], other),
    ]
    record = Record("team-a", launch.proof, job_uid=UID, source="sweep", source_kind="RayJob")
    ours = sort_out([view], pods, {(7, 1): record})
    assert sorted(p["metadata"]["name"] for p in ours.pods[(7, 1)]) == [
        "sweep-abcde-gpu-worker-a",
        "sweep-abcde-gpu-worker-b",
        "sweep-abcde-head-x",
    ]
    out, held = releases(ours.jobs, ours.pods, pods, [node("h100-2"), node("h100-3")])
    assert held == {}
    assert {r.name: r.hostname for r in out} == {
        "sweep-abcde-head-x": "h100-2",
        "sweep-abcde-gpu-worker-a": "h100-2",
        "sweep-abcde-gpu-worker-b": "h100-3",
    }


def test_a_suspended_or_replaced_object_is_no_workload() -> None:
    launch = spec()
    obj = admitted(pytorchjob(), launch)
    record = Record(
        "team-a", launch.proof, job_uid=UID, source="pretrain", source_kind="PyTorchJob"
    )
    assert sort_out([fw.job_view(obj)], [], {(7, 1): record}).jobs
    suspended = copy.deepcopy(obj)
    suspended["spec"]["runPolicy"]["suspend"] = True
    assert not sort_out([fw.job_view(suspended)], [], {(7, 1): record}).jobs
    other = copy.deepcopy(obj)
    other["metadata"]["uid"] = "another"
    ours = sort_out([fw.job_view(other)], [], {(7, 1): record})
    assert not ours.jobs and ours.unproven


def test_a_finished_object_reads_as_a_finished_job() -> None:
    obj = pytorchjob()
    obj["status"] = {
        "conditions": [
            {"type": "Running", "status": "False"},
            {"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-11-28T10:00:00Z"},
        ]
    }
    view = fw.job_view(obj)
    assert view["status"]["conditions"][0]["type"] == "Complete"
    ray = rayjob()
    ray["status"] = {"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"}
    assert fw.job_view(ray)["status"]["conditions"][0]["reason"] == "DeadlineExceeded"
    assert fw.is_finished(ray) and not fw.is_finished(rayjob())


def small_node(name: str, gpus: int) -> dict[str, Any]:
    room = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": room, "capacity": room},
    }


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.lists(st.integers(0, 16), min_size=1, max_size=4),
    gangs=st.lists(
        st.tuples(
            st.booleans(),  # whether the master asks GPUs (else it rides along)
            st.integers(1, 3),  # workers
            st.integers(1, 8),  # GPUs per GPU pod
            st.lists(st.integers(0, 3), min_size=4, max_size=4),  # each GPU pod's node
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_a_gang_of_several_pod_sets_is_released_whole_and_never_overfills_a_node(
    capacity: list[int], gangs: list[Any]
) -> None:
    names = [f"n{i}" for i in range(len(capacity))]
    nodes = [small_node(n, c) for n, c in zip(names, capacity, strict=True)]
    views, pods, records = [], [], {}
    planned: dict[str, set[str]] = {}  # pod -> the nodes of its pod set's part of the plan
    for job_id, (master_gpus, workers, gpus, where) in enumerate(gangs, start=1):
        obj = pytorchjob()
        obj["metadata"] |= {"name": f"j{job_id}", "uid": f"uid-{job_id}"}
        replicas = obj["spec"]["pytorchReplicaSpecs"]
        replicas["Worker"]["replicas"] = workers
        for name, spec_ in replicas.items():
            limits = spec_["template"]["spec"]["containers"][0]["resources"]["limits"]
            limits["nvidia.com/gpu"] = str(gpus)
            if name == "Master" and not master_gpus:
                del limits["nvidia.com/gpu"]
        with_gpus = workers + (1 if master_gpus else 0)
        placement = Counter(names[i % len(names)] for i in where[:with_gpus])
        launch = replace(
            spec(with_gpus, dict(placement)),
            job_id=job_id,
            source=f"j{job_id}",
            source_uid=f"uid-{job_id}",
        )
        launch = replace(launch, gpus_per_worker=gpus)
        obj = admitted(obj, launch)
        views.append(fw.job_view(obj))
        records[(job_id, 1)] = Record(
            "team-a",
            launch.proof,
            job_uid=f"uid-{job_id}",
            source=f"j{job_id}",
            source_kind="PyTorchJob",
        )
        owner = {"kind": "PyTorchJob", "uid": f"uid-{job_id}", "name": f"j{job_id}"}
        replicas = obj["spec"]["pytorchReplicaSpecs"]
        made = [gated_pod(f"j{job_id}-master-0", replicas["Master"]["template"], owner)] + [
            gated_pod(f"j{job_id}-worker-{i}", replicas["Worker"]["template"], owner)
            for i in range(workers)
        ]
        for pod in made:
            plan = json.loads(pod["metadata"]["annotations"][mf.PLACEMENT_ANNOTATION])
            planned[pod["metadata"]["name"]] = {host for host, _ in plan}
        pods += made
    ours = sort_out(views, pods, records)
    out, held = releases(ours.jobs, ours.pods, pods, nodes)
    by_job: dict[str, list[Any]] = {}
    for one in out:
        by_job.setdefault(one.name.split("-")[0], []).append(one)
        assert one.hostname in planned[one.name]  # each pod to its own pod set's plan
    for job_id, (_, workers, _, _) in enumerate(gangs, start=1):
        released = by_job.get(f"j{job_id}", [])
        assert len(released) in (0, workers + 1)  # every pod set, or none
        assert not (released and (job_id, 1) in held)
    # The first gang (nothing before it) is released whenever its plan fits the nodes.
    first_master, first_workers, first_gpus, first_where = gangs[0]
    first_count = first_workers + (1 if first_master else 0)
    want = Counter(names[i % len(names)] for i in first_where[:first_count])
    fits = all(n * first_gpus <= capacity[names.index(host)] for host, n in want.items())
    assert bool(by_job.get("j1")) == fits, held
    # No node holds more GPUs than it has.
    used: Counter[str] = Counter()
    for one in out:
        pod = next(p for p in pods if p["metadata"]["name"] == one.name)
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        used[one.hostname] += int(limits.get("nvidia.com/gpu", 0))
    for name, gpus_there in zip(names, capacity, strict=True):
        assert used[name] <= gpus_there
