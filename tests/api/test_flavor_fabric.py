"""A flavor's fabric (gpuqueue/core/fabric.py): site admins write it, checked so that it adds
network devices and nothing that lifts a worker out of its sandbox; every worker of the
flavor's jobs gets it; a job cannot mount a claim over the paths it mounts."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.cluster.manifests import ClusterOptions, job_manifest
from gpuqueue.cycle.launch import launch_spec
from gpuqueue.models import Flavor, Job
from teams.models import AuditEntry, Team

FABRIC = {
    "resources": {"rdma/rdma_shared_device_a": 1},
    "capabilities": ["IPC_LOCK"],
    "annotations": {"k8s.v1.cni.cncf.io/networks": "ib-a"},
    "runtime_class": "nvidia",
    "volumes": [{"name": "ib", "host_path": "/dev/infiniband", "mount_path": "/dev/infiniband"}],
}


def test_a_site_admin_sets_a_fabric_audited_and_others_may_not(api: Any) -> None:
    changed = api("root").patch("/api/v1/flavors/h100/", {"fabric": FABRIC}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["fabric"] == FABRIC
    assert Flavor.objects.get(name="h100").fabric == FABRIC
    entry = AuditEntry.objects.filter(action="flavor.update").latest("id")
    assert entry.before["fabric"] == {} and entry.after["fabric"] == FABRIC
    assert api("alice").get("/api/v1/flavors/h100/").json()["fabric"] == FABRIC
    refused = api("bob").patch("/api/v1/flavors/h100/", {"fabric": {}}, format="json")
    assert refused.status_code == 403
    assert Flavor.objects.get(name="h100").fabric == FABRIC


@pytest.mark.parametrize(
    ("fabric", "message"),
    [
        ({"privileged": True}, "Unknown key 'privileged'"),
        ({"capabilities": ["SYS_ADMIN"]}, "SYS_ADMIN is not one a fabric may add"),
        ({"resources": {"nvidia.com/gpu": 8}}, "nvidia.com/gpu is set by gpuqueue itself"),
        ({"resources": {"memory": 1}}, "'memory' is not a device resource name"),
        ({"resources": {"rdma/ib": 0}}, "rdma/ib from 1 to 1024; got 0"),
        ({"resources": {"rdma/ib": "1"}}, "rdma/ib needs a whole count"),
        ({"annotations": {"gpuqueue.dev/job-id": "7"}}, "in a domain a fabric may not write"),
        ({"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}}, "may not write"),
        ({"runtime_class": "Not A Name"}, "runtime_class: the name of a RuntimeClass"),
        (
            {"volumes": [{"name": "root", "host_path": "/", "mount_path": "/host"}]},
            "needs an absolute, normalized host_path",
        ),
        (
            {"volumes": [{"name": "etc", "host_path": "/etc", "mount_path": "/host-etc"}]},
            "host path /etc is not under an allowed one (/dev/infiniband)",
        ),
        (
            {"volumes": [{"name": "up", "host_path": "/dev/infiniband/..", "mount_path": "/x"}]},
            "needs an absolute, normalized host_path",
        ),
        (
            {"volumes": [{"name": "i", "host_path": "/dev/infiniband", "mount_path": "/dev/shm"}]},
            "mount path /dev/shm is one gpuqueue mounts itself",
        ),
        ("not an object", "A JSON object"),
    ],
)
def test_a_fabric_that_would_lift_a_worker_out_of_its_sandbox_is_refused(
    api: Any, fabric: Any, message: str
) -> None:
    response = api("root").patch("/api/v1/flavors/h100/", {"fabric": fabric}, format="json")
    assert response.status_code == 400
    assert message in str(response.json()["error"]["fields"]["fabric"])
    assert Flavor.objects.get(name="h100").fabric == {}


def test_the_allowed_host_paths_are_the_installs(api: Any, settings: Any) -> None:
    settings.GPUQUEUE_FABRIC_HOST_PATHS = ["/dev/infiniband", "/opt/rdma"]
    fabric = {"volumes": [{"name": "rdma", "host_path": "/opt/rdma/lib", "mount_path": "/rdma"}]}
    response = api("root").patch("/api/v1/flavors/h100/", {"fabric": fabric}, format="json")
    assert response.status_code == 200, response.content


def with_fabric(*nodes: str) -> None:
    """The flavor h100 with FABRIC, its devices on `nodes` (the watcher's inventory)."""
    from gpuqueue.models import Node

    Flavor.objects.filter(name="h100").update(fabric=FABRIC)
    Node.objects.filter(name__in=nodes).update(devices={"rdma/rdma_shared_device_a": 1000})


def test_every_worker_of_the_flavor_gets_the_fabric(api: Any, job_body: Any) -> None:
    with_fabric("h100-0", "h100-1", "h100-2", "h100-3")
    response = api("alice").post(
        "/api/v1/jobs/",
        {**job_body, "workers": 2, "annotations": {"k8s.v1.cni.cncf.io/networks": "mine"}},
        format="json",
    )
    assert response.status_code == 201, response.content
    job = Job.objects.select_related("team", "flavor").get(pk=response.json()["id"])
    job.placement = {"h100-0": 2}
    manifest = job_manifest(launch_spec(job), ClusterOptions(public_url="http://gpuqueue.test"), {})
    template = manifest["spec"]["template"]
    pod, container = template["spec"], template["spec"]["containers"][0]
    assert container["resources"]["requests"]["rdma/rdma_shared_device_a"] == "1"
    assert container["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["runtimeClassName"] == "nvidia"
    assert {"name": "fabric-ib", "hostPath": {"path": "/dev/infiniband"}} in pod["volumes"]
    # The admin's network, not the job's.
    assert template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "ib-a"


def test_a_flavor_without_a_fabric_adds_nothing(api: Any, job_body: Any) -> None:
    response = api("alice").post("/api/v1/jobs/", job_body, format="json")
    job = Job.objects.select_related("team", "flavor").get(pk=response.json()["id"])
    job.placement = {"h100-0": 1}
    pod = job_manifest(launch_spec(job), ClusterOptions(public_url="http://gpuqueue.test"), {})[
        "spec"
    ]["template"]["spec"]
    assert "runtimeClassName" not in pod
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert not any("hostPath" in volume for volume in pod["volumes"])


def test_a_job_cannot_mount_a_claim_over_the_fabrics_devices(api: Any, job_body: Any) -> None:
    with_fabric("h100-0", "h100-1", "h100-2", "h100-3")
    Team.objects.filter(slug="team-a").update(allowed_claims=["data"])
    response = api("alice").post(
        "/api/v1/jobs/",
        {**job_body, "volumes": [{"claim": "data", "mount_path": "/dev/infiniband/x"}]},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["volumes"] == [
        "Mount path /dev/infiniband/x is under /dev/infiniband, which the flavor h100 mounts "
        "for its network."
    ]
    assert not Job.objects.exists()


def test_a_node_without_the_fabrics_devices_is_not_offered_to_the_flavor(
    api: Any, job_body: Any
) -> None:
    from gpuqueue.cycle.run import run_cycle

    with_fabric("h100-1")
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "workers": 1, "gpus_per_worker": 8}, format="json"
    )
    assert response.status_code == 201, response.content
    run_cycle()
    assert Job.objects.get(pk=response.json()["id"]).placement == {"h100-1": 1}
