"""Variables that select devices belong to the device plugin: a job that sets one is refused at
its `env` field, by the API, the arrays endpoint, the form and the CLI, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard.forms import SubmitForm
from gpuqueue.cluster.manifests import RESERVED_DEVICE_ENV
from gpuqueue.models import Job, JobEvent

pytestmark = pytest.mark.django_db


def _nothing_written() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


@pytest.mark.parametrize("name", sorted(RESERVED_DEVICE_ENV))
def test_a_device_selecting_variable_is_refused_at_env_and_nothing_is_written(
    name: str, api: Any, job_body: Any
) -> None:
    before = _nothing_written()
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "env": {"SEED": "1", name: "all"}}, format="json"
    )
    assert response.status_code == 400, response.content
    (message,) = response.json()["error"]["fields"]["env"]
    assert message.startswith(f"{name} selects devices, which only the device plugin does")
    assert _nothing_written() == before


def test_an_array_that_sets_nvidia_visible_devices_is_refused(api: Any, job_body: Any) -> None:
    body = {**job_body, "env": {"NVIDIA_VISIBLE_DEVICES": "all"}, "array": "0-3"}
    response = api("alice").post("/api/v1/arrays/", body, format="json")
    assert response.status_code == 400, response.content
    assert "env" in response.json()["error"]["fields"]
    assert _nothing_written() == (0, 0)


def test_the_form_refuses_it_with_the_api_s_message(world: Any, nodes: Any) -> None:
    form = SubmitForm(
        data={
            "team": "team-a",
            "flavor": "h100",
            "image": "ghcr.io/acme/train:1",
            "workers": "1",
            "gpus_per_worker": "1",
            "priority": "0",
            "env": "NVIDIA_VISIBLE_DEVICES=all",
        },
        user=world.alice,
    )
    assert form.validated_submission() is None
    (message,) = form.errors["env"]
    assert message.startswith("NVIDIA_VISIBLE_DEVICES selects devices")
    assert _nothing_written() == (0, 0)


def test_the_cli_prints_the_field_and_exits_4(cli: Any, capsys: Any) -> None:
    code = cli(
        "submit",
        "--team=team-a",
        "--flavor=h100",
        "--image=ghcr.io/acme/train:1",
        "--env=NVIDIA_VISIBLE_DEVICES=all",
    )
    assert code == 4
    assert "NVIDIA_VISIBLE_DEVICES selects devices" in capsys.readouterr().err
    assert _nothing_written() == (0, 0)


def test_cuda_visible_devices_only_narrows_and_is_accepted(api: Any, job_body: Any) -> None:
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "env": {"CUDA_VISIBLE_DEVICES": "0"}}, format="json"
    )
    assert response.status_code == 201, response.content
