"""On a real control plane: a flavor's fabric reaches every worker. The pods of a gang ask
kube-scheduler for the node's RDMA devices beside its GPUs (and bind only where they are),
carry IPC_LOCK, the Multus annotation, the runtime class and the InfiniBand device files,
admitted in a namespace whose Pod Security level allows them and refused, with the reason
told, in one whose level does not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from gpuqueue.cluster.manifests import workload_name
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Node
from tests.kube.conftest import Kube
from tests.kube.test_job_authority import _enforce, _pod_security_refusals, _state

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
RDMA = "rdma/ib"
FABRIC = {
    "resources": {RDMA: 1},
    "capabilities": ["IPC_LOCK"],
    "annotations": {"k8s.v1.cni.cncf.io/networks": "ib-a,ib-b"},
    "runtime_class": "nvidia",
    "volumes": [{"name": "ib", "host_path": "/dev/infiniband", "mount_path": "/dev/infiniband"}],
}


@pytest.fixture
def fabric_node(kube: Kube, world: Any) -> Iterator[str]:
    """h100-1 offers 8 RDMA devices and the RuntimeClass `nvidia` exists. (team-a enforces
    no Pod Security level: IPC_LOCK and host paths are past what "baseline" admits.)"""
    node = "h100-1"
    kube.core.patch_node_status(
        node, {"status": {"capacity": {RDMA: "8"}, "allocatable": {RDMA: "8"}}}
    )
    node_api = client.NodeV1Api(kube.api)
    node_api.create_runtime_class(
        {"metadata": {"name": "nvidia"}, "handler": "nvidia"}  # type: ignore[arg-type]
    )
    world.h100.fabric = FABRIC
    world.h100.save()
    kube.sync_until(lambda: Node.objects.get(name=node).devices == {RDMA: 8})
    yield node
    node_api.delete_runtime_class("nvidia")
    kube.core.patch_node_status(
        node, {"status": {"capacity": {RDMA: None}, "allocatable": {RDMA: None}}}
    )


def test_a_fabric_flavors_workers_get_their_network_and_bind_only_where_it_is(
    kube: Kube, submit: Any, fabric_node: str
) -> None:
    job = submit(workers=2, gpus_per_worker=4, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]

    def running() -> bool:
        job.refresh_from_db()
        return job.state == JobState.RUNNING

    kube.sync_until(running, timeout=60)
    pods = kube.pods("team-a", selector=f"gpuqueue.dev/job-id={job.pk}")
    assert len(pods) == 2
    for pod in pods:
        spec = pod["spec"]
        container = spec["containers"][0]
        assert container["resources"]["requests"][RDMA] == "1"
        assert container["resources"]["limits"][RDMA] == "1"
        assert container["securityContext"]["capabilities"] == {
            "drop": ["ALL"],
            "add": ["IPC_LOCK"],
        }
        assert spec["runtimeClassName"] == "nvidia"
        assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "ib-a,ib-b"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["fabric-ib"]["hostPath"]["path"] == "/dev/infiniband"
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["fabric-ib"] == "/dev/infiniband"
    # The scheduler counted the devices: both workers bound, and only where the plan put them.
    job.refresh_from_db()
    assert {pod["spec"]["nodeName"] for pod in pods} == set(job.placement)


def test_a_fabric_flavors_pods_are_admitted_where_pod_security_allows_them_and_only_there(
    kube: Kube, world: Any, submit: Any, fabric_node: str
) -> None:
    """team-a's namespace enforces Pod Security "privileged", the level that admits IPC_LOCK
    and the InfiniBand host path: its worker runs with them. team-b's enforces "baseline": the
    same pod is refused for both, and gpuqueue tells the job's owner why."""
    _enforce(kube, "team-a", "privileged")
    _enforce(kube, "team-b", "baseline")
    try:
        allowed = submit(world.alice, team=world.team_a, gpus_per_worker=4, annotations=LONG)
        refused = submit(world.carol, team=world.team_b, gpus_per_worker=4, annotations=LONG)
        assert sorted(run_cycle(backend=kube.backend).admitted) == sorted([allowed.pk, refused.pk])

        def running() -> bool:
            allowed.refresh_from_db()
            return allowed.state == JobState.RUNNING

        kube.sync_until(running, timeout=60)
        (pod,) = kube.pods("team-a", selector=f"gpuqueue.dev/job-id={allowed.pk}")
        container = pod["spec"]["containers"][0]
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert container["resources"]["limits"][RDMA] == "1"
        assert pod["spec"]["nodeName"] == fabric_node

        name = workload_name(refused.pk, 1)
        kube.wait(lambda: bool(_pod_security_refusals(kube, "team-b", name)))
        (message, *_) = _pod_security_refusals(kube, "team-b", name)
        assert 'violates PodSecurity "baseline' in message
        assert "IPC_LOCK" in message and "hostPath" in message
        assert kube.pods("team-b", selector=f"gpuqueue.dev/job-id={refused.pk}") == []
        kube.sync_until(lambda: _state(refused) == JobState.PENDING)
        reason = refused.events.last().reason
        assert "pods refused" in reason and "violates PodSecurity" in reason
    finally:
        _enforce(kube, "team-a", None)
        _enforce(kube, "team-b", None)
