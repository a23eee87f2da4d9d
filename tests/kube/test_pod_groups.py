"""On a real control plane: Kubernetes 1.37's Workload API as a second lock on the gang.

Where the apiserver serves scheduling.k8s.io/v1beta1 PodGroups (the test control plane of
v1.37.2 turns the GenericWorkload gate on), each gang's Job carries its PodGroup (gang policy,
minCount = workers), so kube-scheduler binds its pods all together or not at all: a pod released
alone, by hand, stays unbound until gpuqueue releases the rest. On older clusters nothing
changes. make test runs this file on v1.34.4 and on v1.37.2.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from gpuqueue.cluster.gates import planned_hostname
from gpuqueue.core.cluster_health import cluster_features
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


def pods_of(kube: Kube, job: Job) -> list[dict[str, Any]]:
    attempt = Job.objects.get(pk=job.pk).attempts
    return kube.pods(
        job.team.namespace, selector=f"gpuqueue.dev/job-id={job.pk},gpuqueue.dev/attempt={attempt}"
    )


def running(job: Job) -> bool:
    return Job.objects.get(pk=job.pk).state == JobState.RUNNING


def test_the_backend_tells_whether_the_cluster_serves_pod_groups(kube: Kube) -> None:
    """Found by discovery at the first pass and kept for /healthz."""
    served = kube.backend.serves_pod_groups()
    minor = int(client.VersionApi(kube.api).get_code().minor.rstrip("+"))
    assert served is (minor >= 37)
    assert cluster_features() == {"pod_groups": served}


def test_a_gang_carries_its_pod_group_and_a_pod_released_alone_is_not_bound(
    kube: Kube, submit: Any
) -> None:
    """A 2 × 8 gang launched but not yet released; someone takes the gate off one of its pods
    by hand, pinned to its planned node. Without PodGroups (1.34) kube-scheduler binds it
    alone, the gap this closes; with them it waits for its PodGroup's minCount. gpuqueue's
    release then binds both."""
    served = kube.backend.serves_pod_groups()
    gang = submit(workers=2, gpus_per_worker=8, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [gang.pk]
    gang.refresh_from_db()
    name = f"gq-{gang.pk}-{gang.attempts}"
    kube.wait(lambda: len(pods_of(kube, gang)) == 2, timeout=30)
    pods = pods_of(kube, gang)
    if served:
        group = kube.json(
            client.SchedulingV1beta1Api(kube.api).read_namespaced_pod_group(
                name, "team-a", _preload_content=False
            )
        )
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
        assert [r["kind"] for r in group["metadata"]["ownerReferences"]] == ["Secret"]
        assert all(p["spec"]["schedulingGroup"] == {"podGroupName": name} for p in pods)
    else:
        assert all("schedulingGroup" not in p["spec"] for p in pods)
    alone = pods[0]
    kube.core.patch_namespaced_pod(
        alone["metadata"]["name"],
        "team-a",
        [
            {"op": "replace", "path": "/spec/schedulingGates", "value": []},
            {
                "op": "add",
                "path": "/spec/nodeSelector",
                "value": {"kubernetes.io/hostname": planned_hostname(alone)},
            },
        ],
    )

    def bound() -> bool:
        return bool(
            kube.core.read_namespaced_pod(alone["metadata"]["name"], "team-a").spec.node_name
        )

    if served:
        time.sleep(10)  # kube-scheduler's queue had every chance to bind it
        assert not bound()
    else:
        kube.wait(bound, timeout=30)
    kube.sync_until(lambda: running(gang), timeout=90)
    assert all(p["spec"].get("nodeName") for p in pods_of(kube, gang))
