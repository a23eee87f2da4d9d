"""DRA flavors through the API: a site admin names a DeviceClass and a selector; gpuqueue counts
the devices under a resource name of its own and refuses what it could not evaluate."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.models import Flavor, Node
from teams.models import AuditEntry

H200 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'"


def test_a_site_admin_makes_a_dra_flavor_and_its_resource_name_is_gpuqueues(api: Any) -> None:
    body = {"name": "h200", "device_class": "gpu.nvidia.com", "device_selector": H200}
    assert api("bob").post("/api/v1/flavors/", body, format="json").status_code == 403
    response = api("root").post("/api/v1/flavors/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["resource_name"] == "dra.gpuqueue.dev/h200"
    flavor = Flavor.objects.get(name="h200")
    assert (flavor.device_class, flavor.device_selector) == ("gpu.nvidia.com", H200)
    entry = AuditEntry.objects.filter(action="flavor.create").latest("id")
    assert entry.after["device_class"] == "gpu.nvidia.com"


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        (
            {"device_class": "gpu.nvidia.com", "device_selector": "device.driver || true"},
            "device_selector",
            "Unexpected text",
        ),
        (
            {
                "device_class": "gpu.nvidia.com",
                "device_selector": "device.allowMultipleAllocations",
            },
            "device_selector",
            "is not evaluated here",
        ),
        ({"device_class": "GPU Class"}, "device_class", "A DeviceClass name"),
        (
            {
                "device_class": "gpu.nvidia.com",
                "shareable": True,
                "slices_per_gpu": 4,
                "sharing_strategy": "Spatial",
            },
            "sharing_strategy",
            "not a valid choice",
        ),
        (
            {"resource_name": "nvidia.com/gpu", "device_selector": H200},
            "device_selector",
            "Only a flavor with a device class",
        ),
        ({"resource_name": "dra.gpuqueue.dev/x"}, "resource_name", "set a device class"),
        ({}, "resource_name", "a device class for DRA devices"),
    ],
)
def test_a_dra_flavor_gpuqueue_could_not_count_is_refused(
    api: Any, body: dict[str, Any], field: str, message: str
) -> None:
    response = api("root").post("/api/v1/flavors/", {"name": "new", **body}, format="json")
    assert response.status_code == 400, response.content
    assert message in str(response.json()["error"]["fields"][field])
    assert not Flavor.objects.filter(name="new").exists()


def test_whether_a_flavor_is_dra_cannot_change_under_its_active_jobs(api: Any, submit: Any) -> None:
    submit()  # an h100 job, pending
    response = api("root").patch(
        "/api/v1/flavors/h100/", {"device_class": "gpu.nvidia.com"}, format="json"
    )
    assert response.status_code == 409, response.content
    assert Flavor.objects.get(name="h100").resource_name == "nvidia.com/gpu"


def test_a_shared_dra_flavor_takes_fractions_each_of_one_worker(api: Any, job_body: Any) -> None:
    """A site admin shares a DRA flavor's devices by MPS; a fraction of one of its GPUs is
    one worker's (every pod of a Job has the same claims: two workers could not each name
    their own device's)."""
    body = {
        "name": "h200-shared",
        "device_class": "gpu.nvidia.com",
        "shareable": True,
        "slices_per_gpu": 4,
        "sharing_strategy": "MPS",
    }
    response = api("root").post("/api/v1/flavors/", body, format="json")
    assert response.status_code == 201, response.content
    flavor = Flavor.objects.get(name="h200-shared")
    assert (flavor.resource_name, flavor.sharing_strategy) == (
        "dra.gpuqueue.dev/h200-shared",
        "MPS",
    )
    fraction = {**job_body, "flavor": "h200-shared", "gpu_milli": 250}
    two = api("alice").post("/api/v1/jobs/", {**fraction, "workers": 2}, format="json")
    assert two.status_code == 400, two.content
    assert "leave workers at 1" in str(two.json()["error"]["fields"]["workers"])
    Node.objects.create(name="dra-0", capacity={flavor.resource_name: 4})  # 4 devices
    one = api("alice").post("/api/v1/jobs/", fraction, format="json")
    assert one.status_code == 201, one.content
