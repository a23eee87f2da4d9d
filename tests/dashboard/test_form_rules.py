"""The dashboard's forms and the API judge alike: both leave the rules to the services, so the
same input gets the same verdict, with the same messages at the same fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from rest_framework.test import APIClient

from dashboard.forms import QuotaForm, SubmitForm
from gpuqueue.models import Job, Quota
from gpuqueue.services.jobs.submit import JOB_FIELDS

pytestmark = pytest.mark.django_db

LEFT_OUT = object()  # a key the API's body leaves out, as a blank form field does

# One good submission, as typed into the form and as the API's JSON.
GOOD_FORM = {
    "team": "team-a",
    "flavor": "h100",
    "name": "sweep",
    "image": "ghcr.io/acme/train:1",
    "command": "python train.py",
    "workers": "2",
    "gpus_per_worker": "4",
    "priority": "0",
    "preemptible": "on",
    "env": "SEED=1",
}
GOOD_BODY = {
    "team": "team-a",
    "flavor": "h100",
    "name": "sweep",
    "image": "ghcr.io/acme/train:1",
    "command": ["python", "train.py"],
    "workers": 2,
    "gpus_per_worker": 4,
    "priority": 0,
    "preemptible": True,
    "env": {"SEED": "1"},
}


@dataclass(frozen=True)
class Case:
    name: str
    typed: dict[str, str]  # over the good form
    sent: dict[str, Any] = field(default_factory=dict)  # over the good body


def bad(name: str, field: str, typed: str, sent: Any) -> Case:
    return Case(name, {field: typed}, {field: sent})


BAD_JOBS = [
    bad("zero workers", "workers", "0", 0),
    bad("workers written in words", "workers", "two", "two"),
    bad("a worker count with a decimal point", "workers", "2.0", 2.0),
    bad("more workers than a gang may have", "workers", "1025", 1025),
    bad("a priority below the lowest", "priority", "-1001", -1001),
    bad("a checkpoint grace longer than a day", "checkpoint_grace_seconds", "86401", 86401),
    bad("a maximum runtime of zero", "max_runtime_seconds", "0", 0),
    bad("no image", "image", "", LEFT_OUT),
    bad(
        "an image with capitals in the path",
        "image",
        "ghcr.io/Acme/train:1",
        "ghcr.io/Acme/train:1",
    ),
    bad("an image with a bad tag", "image", "ghcr.io/acme/train:-x", "ghcr.io/acme/train:-x"),
    bad("a name of 64 characters", "name", "n" * 64, "n" * 64),
    bad("a name that starts with a dash", "name", "-bad-", "-bad-"),
    bad("an unknown flavor", "flavor", "tpu", "tpu"),
    bad("another team's slug", "team", "team-b", "team-b"),
    bad("a worker larger than the largest node", "gpus_per_worker", "9", 9),
    bad("a command of too many words", "command", "x " * 257, ["x"] * 257),
    bad("an env var gpuqueue sets", "env", "WORLD_SIZE=8", {"WORLD_SIZE": "8"}),
    bad("an env name starting with a digit", "env", "1X=y", {"1X": "y"}),
    bad("a label value too long", "labels", "k=" + "v" * 64, {"k": "v" * 64}),
    bad(
        "an annotation key with a bad name",
        "annotations",
        "example.com/-x=v",
        {"example.com/-x": "v"},
    ),
    bad(
        "a simulated exit code past 255",
        "annotations",
        "gpuqueue.dev/sim-exit-code=256",
        {"gpuqueue.dev/sim-exit-code": "256"},
    ),
    bad(
        "a relative mount path",
        "volumes",
        "imagenet:data",
        [{"claim": "imagenet", "mount_path": "data", "read_only": False}],
    ),
    bad("a pull secret with capitals", "image_pull_secrets", "GHCR", ["GHCR"]),
    bad("an env secret twice", "env_from_secrets", "wandb, wandb", ["wandb", "wandb"]),
    bad("an unknown priority class", "priority_class", "high", "high"),
    bad("a service account with '_'", "service_account", "my_sa", "my_sa"),
    bad("/dev/shm of zero", "shm_mib", "0", 0),
    Case(
        "a CPU limit below the request",
        {"cpu_millicores": "8000", "cpu_limit_millicores": "4000"},
        {"cpu_millicores": 8000, "cpu_limit_millicores": 4000},
    ),
    Case(
        "zero workers and no image",
        {"workers": "0", "image": ""},
        {"workers": 0, "image": LEFT_OUT},
    ),
]


def _body(changes: dict[str, Any], good: dict[str, Any]) -> dict[str, Any]:
    body = {**good, **changes}
    return {key: value for key, value in body.items() if value is not LEFT_OUT}


def _api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _api_errors(response: Any) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content
    return response.json()["error"]["fields"]


def _form_errors(form: Any) -> dict[str, list[str]]:
    return {name: list(messages) for name, messages in form.errors.items()}


@pytest.fixture(autouse=True)
def _api_rate(settings: Any) -> None:
    settings.GPUQUEUE_API_RATE = "100000/min"  # a table of calls with one user


@pytest.mark.parametrize("case", BAD_JOBS, ids=[c.name for c in BAD_JOBS])
def test_the_form_and_the_api_refuse_a_bad_submission_alike(
    case: Case, world: Any, nodes: Any
) -> None:
    form = SubmitForm(data=_body(case.typed, GOOD_FORM), user=world.alice)
    assert form.validated_submission() is None
    response = _api(world.alice).post("/api/v1/jobs/", _body(case.sent, GOOD_BODY), format="json")
    assert _form_errors(form) == _api_errors(response)
    assert not Job.objects.exists()


def test_the_form_and_the_api_make_the_same_job_of_the_same_input(
    world: Any, nodes: Any, clients: Any
) -> None:
    """Blank fields take the defaults: the name from the image, one worker of one GPU, the
    checkpoint grace from settings."""
    typed = {"team": "team-a", "flavor": "h100", "image": "ghcr.io/acme/train:1"}
    typed |= {"command": "python train.py", "env": "SEED=1", "preemptible": "on"}
    typed |= {"volumes": "imagenet:/data:ro\nscratch:/scratch", "env_from_secrets": "a, b"}
    typed |= {"memory_mib": "8192", "shm_mib": "1024", "service_account": "trainer"}
    sent = {"team": "team-a", "flavor": "h100", "image": "ghcr.io/acme/train:1"}
    sent |= {"command": ["python", "train.py"], "env": {"SEED": "1"}}
    sent |= {
        "volumes": [
            {"claim": "imagenet", "mount_path": "/data", "read_only": True},
            {"claim": "scratch", "mount_path": "/scratch"},
        ],
        "env_from_secrets": ["a", "b"],
    }
    sent |= {"memory_mib": 8192, "shm_mib": 1024, "service_account": "trainer"}
    world.team_a.allowed_service_accounts = ["trainer"]
    world.team_a.allowed_secrets = ["a", "b"]
    world.team_a.allowed_claims = ["imagenet", "scratch"]
    world.team_a.save()
    assert clients["alice"].post("/jobs/new/", typed).status_code == 303
    assert _api(world.alice).post("/api/v1/jobs/", sent, format="json").status_code == 201
    from_form, from_api = (
        Job.objects.filter(pk=pk).values("team", "flavor", "user", *JOB_FIELDS).get()
        for pk in Job.objects.order_by("pk").values_list("pk", flat=True)
    )
    assert from_form == from_api and from_form["name"] == "train"
    assert from_form["volumes"][1] == {
        "claim": "scratch",
        "mount_path": "/scratch",
        "read_only": False,
    }


BAD_QUOTAS = [
    Case(
        "a guarantee above the limit",
        {"guarantee": "9", "limit": "4"},
        {"guarantee": 9, "limit": 4},
    ),
    Case("a negative limit", {"limit": "-1"}, {"limit": -1}),
    Case("a count written in words", {"guarantee": "eight"}, {"guarantee": "eight"}),
    Case("a count with a decimal point", {"guarantee": "8.0"}, {"guarantee": 8.0}),
    Case("a weight written in words", {"weight": "heavy"}, {"weight": "heavy"}),
    Case("an infinite weight", {"weight": "inf"}, {"weight": "inf"}),
    Case("a weight past a million", {"weight": "1000001"}, {"weight": 1000001}),
    Case(
        "guarantees beyond the capacity",
        {"guarantee": "30", "limit": "32"},
        {"guarantee": 30, "limit": 32},
    ),
    Case(
        "a count in words and a negative limit",
        {"guarantee": "eight", "limit": "-1"},
        {"guarantee": "eight", "limit": -1},
    ),
]


@pytest.mark.parametrize("case", BAD_QUOTAS, ids=[c.name for c in BAD_QUOTAS])
def test_the_form_and_the_api_refuse_a_bad_quota_alike(case: Case, world: Any, nodes: Any) -> None:
    form = QuotaForm(data=_body(case.typed, {"guarantee": "8", "limit": "32", "weight": "1"}))
    assert form.save_quota(world.root, world.team_a, world.h100) is None
    good = {"team": "team-a", "flavor": "h100", "guarantee": 8, "limit": 32, "weight": 1}
    response = _api(world.root).post("/api/v1/quotas/", _body(case.sent, good), format="json")
    assert _form_errors(form) == _api_errors(response)
    assert Quota.objects.get(team=world.team_a, flavor=world.h100).guarantee == 8
