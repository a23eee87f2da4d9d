"""On a real control plane: GPUs handed out by Dynamic Resource Allocation (resource.k8s.io/v1).

The test publishes ResourceSlices as NVIDIA's DRA driver lays its devices out (whole GPUs with
their product, memory and NVLink clique; MIG devices with their profile) for kwok nodes, and the
driver's DeviceClasses. gpuqueue counts them per DRA flavor, admits a gang only when all its
devices fit, launches each worker with a claim from a ResourceClaimTemplate, and kube-scheduler
allocates the devices on the node the placement gate pins the pod to. A pod gpuqueue did not make
that holds a claim makes gpuqueue plan around its devices.

Runs on every pinned release (make test runs it on v1.37.2 too).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.base import LaunchSpec
from gpuqueue.cluster.k8s_calls import Caller
from gpuqueue.cluster.kubernetes import KubernetesBackend
from gpuqueue.cluster.manifests import ClusterOptions
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Flavor, Job, Node, Quota
from gpuqueue.services.cluster.inventory import flavor_capacity
from tests.kube.conftest import Kube
from tests.kube.controlplane import ControlPlane, api_client_for, create_nodes, fake_node

# The admission tests' fixtures (a guarded team namespace, the policy, gpuqueue's account).
from tests.kube.test_admission import GUARDED, guard, guarded, refused_by_policy  # noqa: F401

DRIVER = "gpu.nvidia.com"
H200 = "NVIDIA H200"
LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
# Two nodes of 4 H200 each (one NVLink clique), one of an A100 cut into 7 MIG devices.
GPU_NODES = ("dra-0", "dra-1")
MIG_NODE = "dra-mig-0"
DRA_NODES = (*GPU_NODES, MIG_NODE)
# The driver's DeviceClasses, as its Helm chart installs them.
CLASSES = {
    "gpu.nvidia.com": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'",
    "mig.nvidia.com": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig'",
}


def gpu_device(index: int, node: str) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": H200},
            "uuid": {"string": f"GPU-{node}-{index}"},
            "index": {"int": index},
            "cliqueID": {"string": "a1b2c3.1"},
            "driverVersion": {"version": "580.82.7"},
        },
        "capacity": {"memory": {"value": "141Gi"}},
    }


def mig_device(index: int) -> dict[str, Any]:
    return {
        "name": f"gpu-0-mig-1g10gb-{index}",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": "1g.10gb"},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"},
            "parentIndex": {"int": 0},
        },
        "capacity": {"memory": {"value": "10Gi"}},
    }


def resource_slice(node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


@pytest.fixture(scope="module")
def dra_cluster(control_plane: ControlPlane) -> Iterator[client.ResourceV1Api]:
    """The DRA nodes, their slices and the driver's classes, for this module only."""
    api = api_client_for(control_plane.kubeconfig)
    resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
    create_nodes(api, [fake_node(name, {}) for name in DRA_NODES])
    for name, expression in CLASSES.items():
        resource.create_device_class(
            {
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            }
        )
    for node in GPU_NODES:
        resource.create_resource_slice(
            resource_slice(node, [gpu_device(i, node) for i in range(4)])
        )
    resource.create_resource_slice(resource_slice(MIG_NODE, [mig_device(i) for i in range(7)]))
    # kwok marks a node Ready a moment after it is made (longer on a loaded machine), and
    # gpuqueue counts the devices of ready nodes only: the tests start once all are.
    deadline = time.monotonic() + 60
    while not all(_ready(core.read_node(name)) for name in DRA_NODES):
        assert time.monotonic() < deadline, "the DRA nodes are not Ready within 60 s"
        time.sleep(0.2)
    try:
        yield resource
    finally:
        resource.delete_collection_resource_slice()
        for name in CLASSES:
            resource.delete_device_class(name)
        for name in DRA_NODES:
            core.delete_node(name)


@pytest.fixture
def dra(kube: Kube, world: Any, dra_cluster: client.ResourceV1Api) -> Iterator[Any]:
    """h200 (whole GPUs, by product) and mig-1g (MIG devices of one profile), with quotas."""
    h200 = Flavor.objects.create(
        name="h200",
        device_class="gpu.nvidia.com",
        device_selector=f"device.attributes['{DRIVER}'].productName == '{H200}'",
    )
    mig = Flavor.objects.create(
        name="mig-1g",
        device_class="mig.nvidia.com",
        device_selector=f"device.attributes['{DRIVER}'].profile == '1g.10gb'",
    )
    for team in (world.team_a, world.team_b):
        Quota.objects.create(team=team, flavor=h200, guarantee=4, limit=8)
        Quota.objects.create(team=team, flavor=mig, guarantee=2, limit=7)
    settle_devices(kube, dra_cluster)
    world.h200, world.mig = h200, mig
    yield world
    for namespace in ("others", "team-a", "team-b"):
        dra_cluster.delete_collection_namespaced_resource_claim(namespace)


# The node lifecycle controller's taints (node.kubernetes.io/not-ready, /unreachable, ...).
LIFECYCLE_TAINTS = "node.kubernetes.io/"


def settle_devices(kube: Kube, resource: client.ResourceV1Api) -> None:
    """Start from free devices on ready nodes: the claims of earlier tests' jobs go a moment
    after their pods and Secrets (the garbage collector's pace, slower on a loaded machine),
    and one still allocated would hold its devices against this test's plan; and on a loaded
    machine kwok's heartbeats can lag until the node lifecycle controller marks a DRA node
    not Ready for a moment (only ready nodes' devices count), and its not-ready or unreachable
    taint stays a moment after the node is Ready again (a flavor's pods do not tolerate it, so
    its devices do not count either)."""
    kube.wait(lambda: not resource.list_resource_claim_for_all_namespaces().items, timeout=60)

    def settled() -> bool:
        nodes = list(Node.objects.filter(name__in=DRA_NODES))
        return len(nodes) == len(DRA_NODES) and all(
            n.ready
            and not n.used_externally
            and not n.draining
            and not any(t.get("key", "").startswith(LIFECYCLE_TAINTS) for t in n.taints or ())
            for n in nodes
        )

    kube.sync_until(settled, timeout=60)


def running(*jobs: Job) -> bool:
    return all(Job.objects.get(pk=j.pk).state == JobState.RUNNING for j in jobs)


def pods_of(kube: Kube, job: Job) -> list[dict[str, Any]]:
    attempt = Job.objects.get(pk=job.pk).attempts
    selector = f"gpuqueue.dev/job-id={job.pk},gpuqueue.dev/attempt={attempt}"
    return kube.pods(job.team.namespace, selector=selector)


def claims(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    resource = client.ResourceV1Api(kube.api)
    return kube.json(resource.list_namespaced_resource_claim(namespace, _preload_content=False))[
        "items"
    ]


def allocated_devices(kube: Kube, pod: dict[str, Any]) -> list[tuple[str, str]]:
    """(pool, device) of every device allocated to the pod's claims; a pool is a node here."""
    names = {s["resourceClaimName"] for s in pod["status"].get("resourceClaimStatuses") or []}
    found = []
    for claim in claims(kube, pod["metadata"]["namespace"]):
        if claim["metadata"]["name"] in names:
            allocation = (claim.get("status") or {}).get("allocation") or {}
            found += [
                (r["pool"], r["device"]) for r in allocation.get("devices", {}).get("results", [])
            ]
    return found


def test_each_dra_flavor_counts_the_devices_its_class_and_selector_select(
    kube: Kube, dra: Any
) -> None:
    assert Node.objects.get(name="dra-0").capacity == {"dra.gpuqueue.dev/h200": 4}
    assert Node.objects.get(name=MIG_NODE).capacity == {"dra.gpuqueue.dev/mig-1g": 7}
    assert flavor_capacity(dra.h200) == 8
    assert flavor_capacity(dra.mig) == 7


def test_a_dra_gang_binds_to_its_planned_nodes_with_its_devices_allocated_there(
    kube: Kube, submit: Any, dra: Any
) -> None:
    """2 workers of 4 H200: one per node; each pod's claim holds the 4 GPUs of its own node,
    and a fifth GPU waits in the queue (all 8 are taken)."""
    gang = submit(flavor=dra.h200, workers=2, gpus_per_worker=4, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [gang.pk]
    gang.refresh_from_db()
    assert gang.placement == {"dra-0": 1, "dra-1": 1}
    kube.sync_until(lambda: running(gang), timeout=60)
    pods = pods_of(kube, gang)
    assert Counter(p["spec"]["nodeName"] for p in pods) == Counter({"dra-0": 1, "dra-1": 1})
    for pod in pods:
        node = pod["spec"]["nodeName"]
        assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"].get("limits", {})
        assert sorted(allocated_devices(kube, pod)) == [(node, f"gpu-{i}") for i in range(4)]
    more = submit(flavor=dra.h200, team=dra.team_b, user=dra.carol, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == []
    assert Job.objects.get(pk=more.pk).state == JobState.PENDING


def test_a_gang_is_admitted_only_when_every_worker_finds_its_devices(
    kube: Kube, submit: Any, dra: Any
) -> None:
    """3 workers of 3 GPUs cannot fit on 2 nodes of 4 (9 GPUs on 8, or 2 workers per node):
    nothing of it starts; 2 workers of 3 do."""
    too_big = submit(flavor=dra.h200, workers=3, gpus_per_worker=3, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == []
    assert Job.objects.get(pk=too_big.pk).state == JobState.PENDING
    assert claims(kube, "team-a") == []
    fits = submit(flavor=dra.h200, workers=2, gpus_per_worker=3, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [fits.pk]
    kube.sync_until(lambda: running(fits), timeout=60)


def test_mig_devices_of_a_profile_are_claimed_on_the_mig_node(
    kube: Kube, submit: Any, dra: Any
) -> None:
    job = submit(flavor=dra.mig, gpus_per_worker=2, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]
    kube.sync_until(lambda: running(job), timeout=60)
    [pod] = pods_of(kube, job)
    assert pod["spec"]["nodeName"] == MIG_NODE
    devices = allocated_devices(kube, pod)
    assert len(devices) == 2 and all(d.startswith("gpu-0-mig-1g10gb-") for _, d in devices)


def others_pod_with_claim(kube: Kube, node: str, count: int) -> None:
    """A pod gpuqueue did not make, in namespace `others`, holding `count` H200 of `node`
    through a claim of its own; kube-scheduler allocates and binds it."""
    resource = client.ResourceV1Api(kube.api)
    resource.create_namespaced_resource_claim(
        "others",
        {
            "metadata": {"name": "theirs"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "allocationMode": "ExactCount",
                                "count": count,
                            },
                        }
                    ]
                }
            },
        },
    )
    kube.core.create_namespaced_pod(
        "others",
        {
            "metadata": {"name": "theirs"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "resourceClaims": [{"name": "gpus", "resourceClaimName": "theirs"}],
                "containers": [
                    {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpus"}]}}
                ],
            },
        },
    )

    def allocated() -> bool:
        [claim] = claims(kube, "others")
        return bool((claim.get("status") or {}).get("allocation"))

    kube.wait(allocated, timeout=30)


def test_devices_another_pods_claim_holds_are_planned_around(
    kube: Kube, submit: Any, dra: Any
) -> None:
    """Someone's pod holds 2 GPUs of dra-0 by its own claim: dra-0 reads 2 used by others, a
    worker of 4 goes to dra-1, and a second one waits rather than be planned onto them."""
    others_pod_with_claim(kube, "dra-0", 2)
    kube.sync_until(
        lambda: Node.objects.get(name="dra-0").used_externally == {"dra.gpuqueue.dev/h200": 2}
    )
    first = submit(flavor=dra.h200, gpus_per_worker=4, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [first.pk]
    first.refresh_from_db()
    assert first.placement == {"dra-1": 1}
    kube.sync_until(lambda: running(first), timeout=60)
    second = submit(flavor=dra.h200, gpus_per_worker=4, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == []
    assert Job.objects.get(pk=second.pk).state == JobState.PENDING
    third = submit(flavor=dra.h200, gpus_per_worker=2, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [third.pk]
    kube.sync_until(lambda: running(third), timeout=60)
    [pod] = pods_of(kube, third)
    assert pod["spec"]["nodeName"] == "dra-0"
    assert len(allocated_devices(kube, pod)) == 2


def test_quotas_hold_across_dra_and_extended_resource_flavors(
    kube: Kube, submit: Any, dra: Any
) -> None:
    """Team A's limits: 4 H200 (DRA), 32 H100 (extended resource). Each flavor's limit counts
    its own GPUs: 4 H200 and 8 H100 run together; a fifth H200 waits for its quota although
    4 H200 are free."""
    Quota.objects.filter(team=dra.team_a, flavor=dra.h200).update(guarantee=4, limit=4)
    dra_job = submit(flavor=dra.h200, gpus_per_worker=4, annotations=LONG)
    h100_job = submit(flavor=dra.h100, gpus_per_worker=8, annotations=LONG)
    admitted = run_cycle(backend=kube.backend).admitted
    assert sorted(admitted) == sorted([dra_job.pk, h100_job.pk])
    kube.sync_until(lambda: running(dra_job, h100_job), timeout=60)
    over = submit(flavor=dra.h200, gpus_per_worker=1, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == []
    over.refresh_from_db()
    assert over.state == JobState.PENDING
    assert (over.pending_reason or {}).get("code") == "over_limit"


def test_a_stopped_dra_gang_takes_its_claim_template_with_it(
    kube: Kube, submit: Any, dra: Any
) -> None:
    job = submit(flavor=dra.h200, gpus_per_worker=1, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]
    kube.sync_until(lambda: running(job), timeout=60)
    resource = client.ResourceV1Api(kube.api)
    name = f"gq-{job.pk}-{Job.objects.get(pk=job.pk).attempts}-gpus"
    template = resource.read_namespaced_resource_claim_template(name, "team-a")
    assert template.spec.spec.devices.requests[0].exactly.device_class_name == "gpu.nvidia.com"
    kube.backend.stop(job.pk, Job.objects.get(pk=job.pk).attempts)
    with pytest.raises(ApiException) as gone:
        resource.read_namespaced_resource_claim_template(name, "team-a")
    assert gone.value.status == 404


def test_under_deploys_rbac_and_policy_gpuqueue_makes_claims_and_nobody_else_does(
    kube: Kube, request: pytest.FixtureRequest, dra: Any
) -> None:
    """As gpuqueue's own ServiceAccount, with deploy/'s admission policy installed: a DRA gang's
    claim template is made and the resource claim controller makes each worker's claim from it,
    while a ResourceClaim made by anyone else is still refused."""
    backend = KubernetesBackend(
        request.getfixturevalue("guarded"),
        options=ClusterOptions(public_url="http://gpuqueue.test"),
        caller=Caller(attempts=1, backoff_seconds=0),
        namespaces=lambda: [GUARDED],
        dra_flavors=lambda: [],
    )
    backend.launch(
        LaunchSpec(
            job_id=990101,
            attempt=1,
            team="guarded",
            namespace=GUARDED,
            name="dra-through-the-queue",
            image="ghcr.io/acme/train:1",
            command=[],
            env={},
            labels={},
            annotations={},
            workers=2,
            gpus_per_worker=2,
            resource_name="dra.gpuqueue.dev/h200",
            placement={"dra-0": 2},
            checkpoint_grace_seconds=30,
            max_runtime_seconds=None,
            device_class="gpu.nvidia.com",
            device_selector=dra.h200.device_selector,
        )
    )

    def claimed() -> bool:
        pods = kube.pods(GUARDED, selector="gpuqueue.dev/job-id=990101")
        return len(pods) == 2 and all(
            (p.get("status") or {}).get("resourceClaimStatuses") for p in pods
        )

    kube.wait(claimed, timeout=30)
    assert len(claims(kube, GUARDED)) == 2
    theirs = {
        "metadata": {"name": "around-the-queue"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}
                ]
            }
        },
    }
    refused_by_policy(
        lambda: client.ResourceV1Api(kube.api).create_namespaced_resource_claim(GUARDED, theirs),
        says="ResourceClaim",
    )


def test_a_gang_whose_devices_another_claim_took_since_the_plan_is_not_released(
    kube: Kube, submit: Any, dra: Any
) -> None:
    """The plan puts a worker of 4 H200 on each node; before the gate releases the gang,
    someone's claim takes a GPU of dra-0. The gate counts DRA devices: the gang is held with
    the numbers rather than released onto a node whose devices cannot all be allocated."""
    gang = submit(flavor=dra.h200, workers=2, gpus_per_worker=4, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [gang.pk]
    kube.wait(lambda: len(pods_of(kube, gang)) == 2)
    others_pod_with_claim(kube, "dra-0", 1)
    kube.sync_until(lambda: "free for 4" in (Job.objects.get(pk=gang.pk).message or ""))
    message = Job.objects.get(pk=gang.pk).message
    assert "planned node dra-0 has 3 dra.gpuqueue.dev/h200 free for 4" in message
    assert all(p["spec"].get("schedulingGates") for p in pods_of(kube, gang))
