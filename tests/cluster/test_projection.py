"""What the watcher keeps of nodes, pods and Jobs (gpuqueue.cluster.projection).

The objects under objects/ were captured from the real control plane of tests/kube: a kwok node
(and one tainted), a released and running gpuqueue worker, its Job, and another team's GPU pod.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuqueue.cluster.gates import releases
from gpuqueue.cluster.inventory import hostname_of, inventory, not_ready_since
from gpuqueue.cluster.manifests import PLACEMENT_ANNOTATION, PLACEMENT_GATE
from gpuqueue.cluster.projection import ALL, projector
from gpuqueue.cluster.status import workload_statuses
from tests.cluster.conftest import proven

OBJECTS = Path(__file__).parent / "objects"
NOW = datetime(2026, 11, 24, 15, 0, tzinfo=UTC)
Obj = dict[str, Any]


def captured(name: str) -> Obj:
    obj: Obj = json.loads((OBJECTS / f"{name}.json").read_text())
    return obj


def changed(obj: Obj, edit: Callable[[Obj], None]) -> Obj:
    out = copy.deepcopy(obj)
    edit(out)
    return out


def test_a_node_keeps_its_name_labels_taints_gpus_and_readiness() -> None:
    node = captured("tainted_node")
    kept = projector("nodes")(node)
    meta, status = node["metadata"], node["status"]
    assert kept == {
        "metadata": {
            "name": meta["name"],
            "labels": meta["labels"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"taints": [{"key": "gpuqueue.dev/spot", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": status["allocatable"],
            "conditions": [
                {k: c[k] for k in ("type", "status", "lastTransitionTime")}
                for c in status["conditions"]
            ],
        },
    }


def test_a_running_worker_keeps_what_status_gates_and_inventory_read() -> None:
    pod = captured("worker_pod")
    kept = projector("pods")(pod)
    meta = pod["metadata"]
    assert kept == {
        "metadata": {
            "name": meta["name"],
            "namespace": "team-a",
            "labels": {
                "app.kubernetes.io/managed-by": "gpuqueue",
                "gpuqueue.dev/job-id": "42",
                "gpuqueue.dev/attempt": "1",
            },
            # Its controller, the Job: how gpuqueue proves the pod is its own.
            "ownerReferences": [
                {k: ref[k] for k in ("kind", "name", "uid", "controller")}
                for ref in meta["ownerReferences"]
            ],
            "annotations": meta["annotations"],  # the completion index and the plan
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {
            "nodeName": "h100-0",
            "nodeSelector": {"kubernetes.io/hostname": "h100-0"},
            # What a release checks: the taints it tolerates, what it requests.
            "tolerations": [
                {k: t[k] for k in ("key", "operator", "value", "effect") if k in t}
                for t in pod["spec"]["tolerations"]
            ],
            "containers": [{"resources": pod["spec"]["containers"][0]["resources"]}],
        },
        "status": {
            "phase": "Running",
            "startTime": pod["status"]["startTime"],
            "conditions": [
                {k: c[k] for k in ("type", "status", "lastTransitionTime") if k in c}
                for c in pod["status"]["conditions"]
            ],
            # A running container's state says nothing gpuqueue reads.
            "containerStatuses": [{"name": "worker", "state": {}}],
        },
    }
    assert set(meta["annotations"]) == {
        "batch.kubernetes.io/job-completion-index",
        "gpuqueue.dev/placement",
    }


def test_a_job_keeps_its_identity_parallelism_and_conditions() -> None:
    job = captured("job")
    kept = projector("jobs")(job)
    meta = job["metadata"]
    assert kept == {
        "metadata": {
            "name": "gq-42-1",
            "namespace": "team-a",
            "uid": meta["uid"],
            "labels": {k: meta["labels"][k] for k in kept["metadata"]["labels"]},
            "annotations": {},  # the proof, when it carries one
            # Its owner, the attempt's Secret: how gpuqueue proves the Job is its own.
            "ownerReferences": [
                {k: ref[k] for k in ("kind", "name", "uid") if k in ref}
                for ref in meta["ownerReferences"]
            ],
            "creationTimestamp": meta["creationTimestamp"],
        },
        # Whether it is suspended: a user's labelled Job is a workload only while it is not.
        "spec": {"parallelism": 2, "suspend": job["spec"]["suspend"]},
        "status": {},
    }
    assert len(kept["metadata"]["labels"]) == 3


@pytest.mark.parametrize("name", ["node", "tainted_node", "worker_pod", "other_pod", "job"])
def test_what_is_dropped_is_most_of_the_object(name: str) -> None:
    obj = captured(name)
    kind = "nodes" if "node" in name else "pods" if "pod" in name else "jobs"
    kept = projector(kind)(copy.deepcopy(obj))
    assert "managedFields" not in kept["metadata"]
    assert len(json.dumps(kept)) < len(json.dumps(obj)) / 3
    assert projector(kind)(kept) == kept  # projecting twice changes nothing


def test_the_projection_leaves_the_listed_object_alone_and_shares_key_strings() -> None:
    pod = captured("worker_pod")
    before = copy.deepcopy(pod)
    first, second = projector("pods")(pod), projector("pods")(copy.deepcopy(pod))
    assert pod == before
    assert [id(k) for k in first["status"]] == [id(k) for k in second["status"]]


def test_a_null_where_a_mapping_is_expected_is_kept_as_sent() -> None:
    assert projector("pods")({"metadata": {"name": "p", "labels": None}, "spec": None}) == {
        "metadata": {"name": "p", "labels": None},
        "spec": None,
    }
    assert ALL is True


# Whole and projected objects give the readers the same answers --------------------------------


def _nodes() -> list[Obj]:
    node, tainted = captured("node"), captured("tainted_node")

    def not_ready(n: Obj) -> None:
        n["metadata"]["name"] = n["metadata"]["labels"]["kubernetes.io/hostname"] = "h100-9"
        n["status"]["conditions"] = [
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-24T14:00:00Z"}
        ]

    def cordoned(n: Obj) -> None:
        n["metadata"]["name"] = n["metadata"]["labels"]["kubernetes.io/hostname"] = "h100-8"
        n["spec"]["unschedulable"] = True
        n["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-01"}]

    return [node, tainted, changed(node, not_ready), changed(node, cordoned)]


def _pods() -> list[Obj]:
    worker, other = captured("worker_pod"), captured("other_pod")
    index = "batch.kubernetes.io/job-completion-index"

    def second(p: Obj) -> None:
        p["metadata"]["name"] += "-second"
        p["metadata"]["annotations"][index] = "1"

    def as_attempt(attempt: int) -> Callable[[Obj], None]:
        def edit(p: Obj) -> None:
            p["metadata"]["name"] += f"-a{attempt}"
            p["metadata"]["labels"]["gpuqueue.dev/attempt"] = str(attempt)
            p["metadata"]["ownerReferences"][0]["uid"] = f"job-uid-{attempt}"

        return edit

    def gated(p: Obj) -> None:
        as_attempt(2)(p)
        p["spec"].pop("nodeName")
        p["spec"]["nodeSelector"] = {"pool": "a"}
        p["spec"]["schedulingGates"] = [{"name": PLACEMENT_GATE}, {"name": "other.io/gate"}]
        # Planned on the spot node: the flavor's toleration of its taint lets it be released.
        p["spec"]["tolerations"].append(
            {"key": "gpuqueue.dev/spot", "operator": "Equal", "value": "true"}
        )
        p["metadata"]["annotations"][PLACEMENT_ANNOTATION] = '[["h100-spot-0",1]]'
        p["status"] = {"phase": "Pending"}

    def unbindable(p: Obj) -> None:
        as_attempt(3)(p)
        p["spec"].pop("nodeName")
        p["status"] = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/4 nodes are available: 1 Insufficient nvidia.com/gpu.",
                    # Within the grace: still starting, which a lost time would not say.
                    "lastTransitionTime": "2026-11-24T14:59:30Z",
                }
            ],
        }

    def oom(p: Obj) -> None:
        as_attempt(4)(p)
        p["status"]["containerStatuses"][0]["state"] = {
            "terminated": {"exitCode": 137, "reason": "OOMKilled", "message": "x" * 100}
        }

    def pull_failed(p: Obj) -> None:
        as_attempt(5)(p)
        p["status"]["phase"] = "Pending"
        p["status"]["containerStatuses"][0]["state"] = {
            "waiting": {"reason": "ErrImagePull", "message": "not found"}
        }

    def bad_config(p: Obj) -> None:
        as_attempt(6)(p)
        p["status"]["containerStatuses"][0]["state"] = {
            "waiting": {"reason": "CreateContainerConfigError", "message": "no secret"}
        }

    def disrupted(p: Obj) -> None:
        as_attempt(7)(p)
        p["status"]["conditions"].append(
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        )

    def evicted(p: Obj) -> None:
        as_attempt(8)(p)
        p["status"].update(phase="Failed", reason="Evicted")

    def on_lost_node(p: Obj) -> None:
        as_attempt(9)(p)
        p["spec"]["nodeName"] = "h100-9"

    def terminating(p: Obj) -> None:
        p["metadata"]["name"] += "-terminating"
        p["metadata"]["deletionTimestamp"] = "2026-11-24T14:59:30Z"

    def nominated(p: Obj) -> None:
        p["metadata"]["name"] += "-nominated"
        p["spec"].pop("nodeName")
        p["spec"]["initContainers"] = [
            {"name": "init", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
        ]
        p["status"] = {"phase": "Pending", "nominatedNodeName": "h100-0"}

    edits = [second, gated, unbindable, oom, pull_failed, bad_config, disrupted, evicted]
    return [
        worker,
        other,
        *(changed(worker, edit) for edit in [*edits, on_lost_node, terminating]),
        changed(other, nominated),
    ]


def _jobs() -> list[Obj]:
    job = captured("job")

    def attempt(n: int, status: Obj | None = None, **meta: str) -> Callable[[Obj], None]:
        def edit(j: Obj) -> None:
            j["metadata"]["name"] = f"gq-42-{n}"
            j["metadata"]["uid"] = f"job-uid-{n}"
            j["metadata"]["ownerReferences"][0].update(name=f"gq-42-{n}-token", uid=f"s-{n}")
            j["metadata"]["labels"]["gpuqueue.dev/attempt"] = str(n)
            j["metadata"].update(meta)
            j["spec"]["parallelism"] = 1  # each of these attempts has one pod above
            j["status"] = status or {"active": 1}

        return edit

    def condition(kind: str, **more: str) -> Obj:
        return {
            "type": kind,
            "status": "True",
            "lastTransitionTime": "2026-11-24T14:58:00Z",
            "lastProbeTime": "2026-11-24T14:58:00Z",
            **more,
        }

    done = {"completionTime": "2026-11-24T14:58:01Z", "conditions": [condition("Complete")]}
    failed = {"conditions": [condition("Failed", reason="BackoffLimitExceeded", message="m")]}
    return [
        job,
        *(changed(job, attempt(n)) for n in range(2, 10)),
        changed(job, attempt(10, done)),
        changed(job, attempt(11, failed)),
        changed(job, attempt(12, deletionTimestamp="2026-11-24T14:59:00Z")),
    ]


def _answers(nodes: list[Obj], pods: list[Obj], jobs: list[Obj]) -> Any:
    not_ready = {n["metadata"]["name"]: not_ready_since(n) for n in nodes}
    ours = proven(jobs, pods)
    return (
        [inventory(nodes, pods, live, ours.pod_keys) for live in (None, set(), {(42, 1), (42, 2)})],
        releases(ours.jobs, ours.pods, pods, nodes),
        [hostname_of(n) for n in nodes],
        not_ready,
        workload_statuses(
            ours.jobs,
            ours.pods,
            not_ready,
            NOW,
            timedelta(minutes=5),
            node_lost_grace=timedelta(minutes=1),
        ),
    )


def test_status_inventory_and_gates_answer_the_same_from_projected_objects() -> None:
    nodes, pods, jobs = _nodes(), _pods(), _jobs()
    whole = _answers(nodes, pods, jobs)
    projected = _answers(
        [projector("nodes")(n) for n in nodes],
        [projector("pods")(p) for p in pods],
        [projector("jobs")(j) for j in jobs],
    )
    assert projected == whole
    # The cases above reach every outcome they are there for.
    statuses = {s.attempt: s for s in whole[4]}
    assert {s.phase.value for s in statuses.values()} >= {"RUNNING", "SUCCEEDED", "FAILED", "LOST"}
    (released,) = whole[1][0]
    assert (released.hostname, released.gates) == ("h100-spot-0", ("other.io/gate",))
    assert released.node_selector == {"pool": "a"}
