"""What a job asks of its pods besides GPUs (CPU, memory, /dev/shm, volumes, Secrets, priority
class, ServiceAccount): refused at the field with nothing written, or kept and launched."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.client.cli import _parser, job_spec
from gpuqueue.cycle.launch import launch_spec
from gpuqueue.models import Flavor, Job, JobEvent
from teams.models import Team

VOLUME = {"claim": "imagenet", "mount_path": "/data", "read_only": True}

BAD_SPECS = [
    # (what is wrong, changes to the body, the field named in the error)
    ("a negative CPU request", {"cpu_millicores": -1}, "cpu_millicores"),
    ("CPU as a string", {"cpu_millicores": "4000"}, "cpu_millicores"),
    ("a CPU request over the flavor's maximum", {"cpu_millicores": 64001}, "cpu_millicores"),
    (
        "a CPU limit over the flavor's maximum",
        {"cpu_limit_millicores": 70000},
        "cpu_limit_millicores",
    ),
    (
        "a CPU limit below the request",
        {"cpu_millicores": 8000, "cpu_limit_millicores": 4000},
        "cpu_limit_millicores",
    ),
    ("memory over the flavor's maximum", {"memory_mib": 600000}, "memory_mib"),
    (
        "a memory limit below the request",
        {"memory_mib": 8192, "memory_limit_mib": 4096},
        "memory_limit_mib",
    ),
    ("a zero /dev/shm", {"shm_mib": 0}, "shm_mib"),
    ("/dev/shm larger than the memory", {"memory_mib": 1024, "shm_mib": 2048}, "shm_mib"),
    ("volumes that are no list", {"volumes": VOLUME}, "volumes"),
    ("a volume without a claim", {"volumes": [{"mount_path": "/data"}]}, "volumes.0.claim"),
    ("a claim with capitals", {"volumes": [{**VOLUME, "claim": "ImageNet"}]}, "volumes"),
    ("a relative mount path", {"volumes": [{**VOLUME, "mount_path": "data"}]}, "volumes"),
    ("a mount path with '..'", {"volumes": [{**VOLUME, "mount_path": "/data/../etc"}]}, "volumes"),
    ("a mount under /dev/shm", {"volumes": [{**VOLUME, "mount_path": "/dev/shm/x"}]}, "volumes"),
    (
        "a mount over gpuqueue's podinfo",
        {"volumes": [{**VOLUME, "mount_path": "/etc/gpuqueue"}]},
        "volumes",
    ),
    ("two volumes at one path", {"volumes": [VOLUME, {**VOLUME, "claim": "other"}]}, "volumes"),
    (
        "seventeen volumes",
        {"volumes": [{**VOLUME, "mount_path": f"/d{i}"} for i in range(17)]},
        "volumes",
    ),
    ("an unknown volume key", {"volumes": [{**VOLUME, "subPath": "x"}]}, "volumes.0.subPath"),
    ("read_only as a string", {"volumes": [{**VOLUME, "read_only": "yes"}]}, "volumes.0.read_only"),
    ("a pull secret with a slash", {"image_pull_secrets": ["a/b"]}, "image_pull_secrets"),
    ("an env secret twice", {"env_from_secrets": ["wandb", "wandb"]}, "env_from_secrets"),
    ("an env secret that is a number", {"env_from_secrets": [3]}, "env_from_secrets.0"),
    ("an unknown priority class", {"priority_class": "system-node-critical"}, "priority_class"),
    ("a service account with '_'", {"service_account": "my_sa"}, "service_account"),
]


@pytest.fixture
def limited(world: Any, settings: Any) -> Flavor:
    """h100 with per-GPU defaults, per-worker maxima, and one priority class allowed."""
    settings.GPUQUEUE_PRIORITY_CLASSES = ["gpu-batch"]
    Flavor.objects.filter(pk=world.h100.pk).update(
        cpu_millicores_per_gpu=12000,
        memory_mib_per_gpu=98304,
        max_cpu_millicores_per_worker=64000,
        max_memory_mib_per_worker=524288,
    )
    return Flavor.objects.get(pk=world.h100.pk)


@pytest.mark.parametrize(("what", "change", "field"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_a_bad_workload_spec_is_refused_at_its_field_and_changes_nothing(
    what: str, change: dict[str, Any], field: str, api: Any, job_body: Any, limited: Flavor
) -> None:
    before = (Job.objects.count(), JobEvent.objects.count())
    response = api("alice").post("/api/v1/jobs/", {**job_body, **change}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and field in error["fields"], error
    assert (Job.objects.count(), JobEvent.objects.count()) == before


def test_the_flavor_s_maximum_is_named_in_the_message(
    api: Any, job_body: Any, limited: Flavor
) -> None:
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "cpu_millicores": 80000}, format="json"
    )
    (message,) = response.json()["error"]["fields"]["cpu_millicores"]
    assert message == "80000 millicores per worker is more than flavor h100 allows: at most 64000."


def test_with_no_priority_classes_configured_none_is_allowed(
    api: Any, job_body: Any, settings: Any
) -> None:
    settings.GPUQUEUE_PRIORITY_CLASSES = []
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "priority_class": "gpu-batch"}, format="json"
    )
    assert response.status_code == 400
    assert "allows none" in response.json()["error"]["fields"]["priority_class"][0]


def test_defaults_come_from_the_flavor_per_gpu_capped_by_its_maximum(
    api: Any, job_body: Any, limited: Flavor
) -> None:
    response = api("alice").post("/api/v1/jobs/", {**job_body, "gpus_per_worker": 8}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    # 8 × 12000 millicores is over the maximum of 64000; 8 × 96 GiB is over 512 GiB.
    assert (body["cpu_millicores"], body["memory_mib"]) == (64000, 524288)
    assert body["cpu_limit_millicores"] is None and body["memory_limit_mib"] is None
    assert body["volumes"] == [] and body["priority_class"] == "" and body["service_account"] == ""
    spec = launch_spec(Job.objects.select_related("team", "flavor").get(pk=body["id"]))
    assert (spec.cpu_millicores, spec.memory_mib, spec.shm_mib) == (64000, 524288, None)


def test_a_full_workload_spec_is_kept_and_reaches_the_launch(
    api: Any, job_body: Any, limited: Flavor
) -> None:
    spec_fields = {
        "cpu_millicores": 16000,
        "cpu_limit_millicores": 16000,
        "memory_mib": 65536,
        "memory_limit_mib": 65536,
        "shm_mib": 16384,
        "volumes": [VOLUME, {"claim": "scratch", "mount_path": "/scratch"}],
        "image_pull_secrets": ["ghcr-pull"],
        "env_from_secrets": ["wandb", "hf-token"],
        "priority_class": "gpu-batch",
        "service_account": "trainer",
    }
    Team.objects.filter(slug="team-a").update(
        allowed_service_accounts=["trainer"],
        allowed_secrets=["ghcr-pull", "wandb", "hf-token"],
        allowed_claims=["imagenet", "scratch"],
    )
    response = api("alice").post("/api/v1/jobs/", {**job_body, **spec_fields}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    want = {**spec_fields, "volumes": [VOLUME, {**spec_fields["volumes"][1], "read_only": False}]}
    assert {key: body[key] for key in want} == want
    again = api("alice").get(f"/api/v1/jobs/{body['id']}/").json()
    assert {key: again[key] for key in want} == want
    launched = launch_spec(Job.objects.select_related("team", "flavor").get(pk=body["id"]))
    assert launched.cpu_limit_millicores == 16000 and launched.memory_limit_mib == 65536
    assert launched.shm_mib == 16384
    assert list(launched.volumes) == want["volumes"]
    assert list(launched.env_from_secrets) == ["wandb", "hf-token"]
    assert (launched.priority_class, launched.service_account) == ("gpu-batch", "trainer")


def test_a_job_from_before_these_fields_launches_with_the_flavor_s_values(
    submit: Any, limited: Flavor
) -> None:
    job = submit(workers=1, gpus_per_worker=2)
    Job.objects.filter(pk=job.pk).update(cpu_millicores=None, memory_mib=None)
    spec = launch_spec(Job.objects.select_related("team", "flavor").get(pk=job.pk))
    assert (spec.cpu_millicores, spec.memory_mib) == (24000, 196608)


def test_the_cli_flags_become_the_fields() -> None:
    args = _parser().parse_args(
        [
            "submit",
            "--image=x",
            "--cpu=4000",
            "--cpu-limit=8000",
            "--memory=16384",
            "--memory-limit=32768",
            "--shm=2048",
            "--volume=imagenet:/data:ro",
            "--volume=scratch:/scratch",
            "--image-pull-secret=ghcr-pull",
            "--env-from-secret=wandb",
            "--priority-class=gpu-batch",
            "--service-account=trainer",
        ]
    )
    spec = job_spec(args)
    assert spec["volumes"] == [
        VOLUME,
        {"claim": "scratch", "mount_path": "/scratch", "read_only": False},
    ]
    assert (spec["cpu_millicores"], spec["cpu_limit_millicores"]) == (4000, 8000)
    assert (spec["memory_mib"], spec["memory_limit_mib"], spec["shm_mib"]) == (16384, 32768, 2048)
    assert spec["image_pull_secrets"] == ["ghcr-pull"] and spec["env_from_secrets"] == ["wandb"]
    assert (spec["priority_class"], spec["service_account"]) == ("gpu-batch", "trainer")
    with pytest.raises(ValueError, match="CLAIM:PATH"):
        job_spec(_parser().parse_args(["submit", "--volume=imagenet"]))
