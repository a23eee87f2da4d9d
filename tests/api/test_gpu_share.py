"""A fraction of a GPU, GPU memory and GPU models at submission: each bad request is refused at
its field in the one error shape and changes nothing; good ones are stored and read back."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.models import Flavor, Job, JobEvent, Node

H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def shared(shared_flavor: Flavor, nodes: Any) -> Flavor:
    """The shared flavor, after the API's node inventory (whose H100 nodes report their
    model; the L4 nodes do not)."""
    Node.objects.filter(name__startswith="h100-").update(gpu_model=H100)
    return shared_flavor


BAD = [
    # (what is wrong, the body's changes, the field named, words the message holds)
    (
        "a fraction on a flavor that does not share",
        {"gpu_milli": 250},
        "gpu_milli",
        "does not share its GPUs: ask whole GPUs, or a shared flavor (h100-shared)",
    ),
    (
        "a fraction that is no whole number of slices",
        {"flavor": "h100-shared", "gpu_milli": 300},
        "gpu_milli",
        "h100-shared has 4 slices per GPU: ask 250, 500 or 750 thousandths.",
    ),
    (
        "a fraction with two GPUs per worker",
        {"flavor": "h100-shared", "gpu_milli": 250, "gpus_per_worker": 2},
        "gpus_per_worker",
        "leave gpus_per_worker at 1",
    ),
    (
        "a fraction of a whole GPU",
        {"flavor": "h100-shared", "gpu_milli": 1000},
        "gpu_milli",
        "less than or equal to 999",
    ),
    (
        "GPU memory on a flavor that does not share",
        {"gpu_memory_mib": 1024},
        "gpu_memory_mib",
        "does not share its GPUs",
    ),
    (
        "GPU memory and a fraction both",
        {"flavor": "h100-shared", "gpu_milli": 250, "gpu_memory_mib": 1024},
        "gpu_memory_mib",
        "Ask either gpu_milli or gpu_memory_mib, not both.",
    ),
    (
        "GPU memory of a whole GPU",
        {"flavor": "h100-shared", "gpu_memory_mib": 81920},
        "gpu_memory_mib",
        "is a whole h100-shared GPU or more (each has 81920 MiB)",
    ),
    (
        "a GPU model no node of the flavor has",
        {"gpu_models": ["NVIDIA-A100-SXM4-80GB"]},
        "gpu_models",
        f"Flavor h100 has no node of GPU model NVIDIA-A100-SXM4-80GB: its nodes have {H100}.",
    ),
    (
        "a GPU model on a flavor whose nodes report none",
        {"flavor": "l4", "gpu_models": ["NVIDIA-L4"]},
        "gpu_models",
        "No node of flavor l4 reports its GPU model",
    ),
    (
        "a GPU model named twice",
        {"gpu_models": [H100, H100]},
        "gpu_models",
        "Each GPU model is named once.",
    ),
    ("GPU models as a string", {"gpu_models": H100}, "gpu_models", ""),
    (
        "devices chosen by the submitter",
        {"flavor": "h100-shared", "gpu_milli": 250, "gpu_devices": [["h100-shared-0", 1]]},
        "gpu_devices",
        "Unknown field.",
    ),
]


def counts() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


@pytest.mark.parametrize(("what", "change", "field", "words"), BAD, ids=[c[0] for c in BAD])
def test_a_bad_share_or_model_is_refused_and_changes_nothing(
    what: str, change: dict[str, Any], field: str, words: str, api: Any, job_body: Any, shared: Any
) -> None:
    before = counts()
    response = api("alice").post("/api/v1/jobs/", {**job_body, **change}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and field in error["fields"], error
    assert words in " ".join(map(str, error["fields"][field])), error
    assert counts() == before


def test_a_fraction_is_stored_and_read_back(api: Any, job_body: Any, shared: Any) -> None:
    body = {**job_body, "flavor": "h100-shared", "gpu_milli": 250, "workers": 2}
    response = api("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    job = response.json()
    assert (job["gpu_milli"], job["gpus_per_worker"], job["gpu_devices"]) == (250, 1, [])
    Job.objects.filter(pk=job["id"]).update(gpu_devices=[["h100-shared-0", 0]] * 2)
    read = api("alice").get(f"/api/v1/jobs/{job['id']}/").json()
    assert read["gpu_devices"] == [["h100-shared-0", 0], ["h100-shared-0", 0]]
    assert api("carol").get(f"/api/v1/jobs/{job['id']}/").status_code == 404


def test_gpu_memory_becomes_the_fewest_slices_that_hold_it(
    api: Any, job_body: Any, shared: Any
) -> None:
    """30,000 MiB of an 81,920 MiB GPU in quarters: 1.46 quarters, so two, 500 thousandths."""
    body = {**job_body, "flavor": "h100-shared", "gpu_memory_mib": 30000}
    response = api("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["gpu_milli"] == 500
    assert Job.objects.get(pk=response.json()["id"]).gpu_milli == 500


def test_gpu_models_are_stored_and_read_back(api: Any, job_body: Any, shared: Any) -> None:
    response = api("alice").post("/api/v1/jobs/", {**job_body, "gpu_models": [H100]}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["gpu_models"] == [H100]
    assert Job.objects.get(pk=response.json()["id"]).gpu_models == [H100]


def test_flavor_sharing_is_a_site_admins_and_checked(api: Any, shared: Any) -> None:
    body = {"name": "l4-shared", "resource_name": "nvidia.com/gpu.shared", "shareable": True}
    response = api("root").post("/api/v1/flavors/", body, format="json")
    assert response.status_code == 400, response.content
    assert "slices_per_gpu" in response.json()["error"]["fields"]
    plain = {"name": "l4-plain", "resource_name": "nvidia.com/gpu", "slices_per_gpu": 4}
    response = api("root").post("/api/v1/flavors/", plain, format="json")
    assert response.status_code == 400, response.content
    assert "slices_per_gpu" in response.json()["error"]["fields"]
    good = {**body, "slices_per_gpu": 10, "gpu_memory_mib": 23034}
    assert api("bob").post("/api/v1/flavors/", good, format="json").status_code == 403
    response = api("root").post("/api/v1/flavors/", good, format="json")
    assert response.status_code == 201, response.content
    assert (response.json()["shareable"], response.json()["slices_per_gpu"]) == (True, 10)


def test_a_fraction_takes_its_part_of_the_flavors_cpu_and_memory_per_gpu(
    api: Any, job_body: Any, shared: Flavor
) -> None:
    shared.cpu_millicores_per_gpu, shared.memory_mib_per_gpu = 12000, 98304
    shared.save()
    body = {**job_body, "flavor": "h100-shared", "gpu_milli": 250}
    response = api("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    assert (response.json()["cpu_millicores"], response.json()["memory_mib"]) == (3000, 24576)


def test_a_flavor_s_sharing_cannot_change_under_active_fractional_jobs(
    api: Any, job_body: Any, shared: Flavor
) -> None:
    body = {**job_body, "flavor": "h100-shared", "gpu_milli": 250}
    job = api("alice").post("/api/v1/jobs/", body, format="json").json()
    response = api("root").patch(
        "/api/v1/flavors/h100-shared/", {"slices_per_gpu": 10}, format="json"
    )
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "in_use"
    assert Flavor.objects.get(name="h100-shared").slices_per_gpu == 4
    cancel = api("alice").post(f"/api/v1/jobs/{job['id']}/cancel/", {}, format="json")
    assert cancel.status_code == 200, cancel.content
    response = api("root").patch(
        "/api/v1/flavors/h100-shared/", {"slices_per_gpu": 10}, format="json"
    )
    assert response.status_code == 200, response.content
