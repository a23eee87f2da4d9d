"""Bad input is refused with field-level errors in the one error shape, and changes nothing:
each case counts the rows before and after."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.models import Job, JobEvent, Node, Quota
from teams.models import AuditEntry

BAD_JOBS = [
    # (what is wrong, changes to the body, the field named in the error)
    ("an image with spaces", {"image": "ghcr.io/acme/train 1"}, "image"),
    ("an image with capitals in the path", {"image": "ghcr.io/Acme/train:1"}, "image"),
    ("an image with a bad tag", {"image": "ghcr.io/acme/train:-x"}, "image"),
    ("no image", {"image": ""}, "image"),
    ("a command that is a string", {"command": "python train.py"}, "command"),
    ("a command with a number", {"command": ["python", 3]}, "command.1"),
    ("an env name starting with a digit", {"env": {"1X": "y"}}, "env"),
    ("an env value that is a number", {"env": {"X": 1}}, "env.X"),
    ("an env var gpuqueue sets", {"env": {"WORLD_SIZE": "8"}}, "env"),
    ("an env value too large", {"env": {"X": "y" * 9000}}, "env"),
    ("zero workers", {"workers": 0}, "workers"),
    ("workers as a string", {"workers": "2"}, "workers"),
    ("zero GPUs per worker", {"gpus_per_worker": 0}, "gpus_per_worker"),
    ("a worker larger than the largest node", {"gpus_per_worker": 9}, "gpus_per_worker"),
    ("a gang larger than the flavor", {"workers": 1024, "gpus_per_worker": 8}, "workers"),
    ("a priority out of range", {"priority": 5000}, "priority"),
    ("an unknown flavor", {"flavor": "tpu"}, "flavor"),
    ("an unknown team", {"team": "team-z"}, "team"),
    ("another team's slug", {"team": "team-b"}, "team"),
    ("a label key with a space", {"labels": {"my key": "v"}}, "labels"),
    ("a label value too long", {"labels": {"k": "v" * 64}}, "labels"),
    ("a label prefix that is no DNS name", {"labels": {"Bad_Prefix/k": "v"}}, "labels"),
    ("an annotation key with a bad name", {"annotations": {"example.com/-x": "v"}}, "annotations"),
    ("annotations too large", {"annotations": {"k": "v" * 40000}}, "annotations"),
    (
        "a simulated duration past ten years",
        {"annotations": {"gpuqueue.dev/sim-duration-seconds": "1000000000000"}},
        "annotations",
    ),
    (
        "a simulated duration that is no plain number",
        {"annotations": {"gpuqueue.dev/sim-duration-seconds": "1e3"}},
        "annotations",
    ),
    (
        "a simulated exit code past 255",
        {"annotations": {"gpuqueue.dev/sim-exit-code": "99999999999999999999"}},
        "annotations",
    ),
    ("an unknown field", {"gpus": 8}, "gpus"),
    ("a bad job name", {"name": "-bad-"}, "name"),
    ("preemptible as a string", {"preemptible": "no"}, "preemptible"),
]


def counts() -> tuple[int, ...]:
    return (
        Job.objects.count(),
        JobEvent.objects.count(),
        Quota.objects.count(),
        AuditEntry.objects.count(),
    )


@pytest.mark.parametrize(("what", "change", "field"), BAD_JOBS, ids=[c[0] for c in BAD_JOBS])
def test_a_bad_submission_is_refused_and_changes_nothing(
    what: str, change: dict[str, Any], field: str, api: Any, job_body: Any
) -> None:
    before = counts()
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, **change}, format="json", HTTP_IDEMPOTENCY_KEY=what
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and field in error["fields"], error
    assert counts() == before


def test_an_unschedulable_worker_is_refused_with_the_numbers(api: Any, job_body: Any) -> None:
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "gpus_per_worker": 12}, format="json"
    )
    message = response.json()["error"]["fields"]["gpus_per_worker"][0]
    assert "12" in message and "has 8" in message


def test_a_gang_larger_than_the_whole_flavor_is_refused_with_the_numbers(
    api: Any, job_body: Any
) -> None:
    """4 nodes of 8 H100s: a gang of 1,024 × 8 could never start; the error says why."""
    before = counts()
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "workers": 1024, "gpus_per_worker": 8}, format="json"
    )
    assert response.status_code == 400
    message = response.json()["error"]["fields"]["workers"][0]
    assert "8192 h100 GPUs (1024 × 8)" in message and "has 32 h100 GPUs in all" in message
    assert "at most 4 workers of 8" in message
    assert counts() == before
    fits = api("alice").post(
        "/api/v1/jobs/", {**job_body, "workers": 4, "gpus_per_worker": 8}, format="json"
    )
    assert fits.status_code == 201, fits.content


def test_workers_that_no_set_of_nodes_holds_are_refused_with_the_numbers(
    api: Any, job_body: Any
) -> None:
    """4 nodes of 8 H100s: 6 workers of 5 GPUs are 30 of the 32 GPUs, but a worker runs on one
    node and each node holds one worker of 5; the job would wait for ever."""
    before = counts()
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "workers": 6, "gpus_per_worker": 5}, format="json"
    )
    assert response.status_code == 400
    message = response.json()["error"]["fields"]["workers"][0]
    assert "(4 nodes of 8 GPUs) hold at most 4 such workers" in message, message
    assert counts() == before
    fits = api("alice").post(
        "/api/v1/jobs/", {**job_body, "workers": 4, "gpus_per_worker": 5}, format="json"
    )
    assert fits.status_code == 201, fits.content


def test_the_refusal_names_each_node_size(api: Any, job_body: Any) -> None:
    """A 4-GPU H100 node beside the four 8-GPU ones: 36 GPUs, but 5 workers of 6 fit only
    on the big nodes, one each."""
    from gpuqueue.models import Node

    Node.objects.create(
        name="h100-small",
        capacity={"nvidia.com/gpu": 4},
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    )
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "workers": 5, "gpus_per_worker": 6}, format="json"
    )
    assert response.status_code == 400
    message = response.json()["error"]["fields"]["workers"][0]
    assert "(4 nodes of 8 GPUs, 1 node of 4 GPUs) hold at most 4 such workers" in message, message


def test_a_flavor_with_no_known_node_is_refused_saying_so(api: Any, job_body: Any) -> None:
    Node.objects.filter(name__startswith="l4").delete()
    before = counts()
    response = api("alice").post("/api/v1/jobs/", {**job_body, "flavor": "l4"}, format="json")
    assert response.status_code == 400
    assert "No node of flavor l4 is known yet" in response.json()["error"]["fields"]["flavor"][0]
    assert counts() == before


def test_a_body_over_the_size_limit_is_refused_with_413(api: Any, job_body: Any) -> None:
    before = counts()
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "command": ["x" * 70000]}, format="json"
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"
    assert counts() == before


def test_malformed_json_is_a_400_in_the_error_shape(api: Any) -> None:
    response = api("alice").post("/api/v1/jobs/", b"{not json", content_type="application/json")
    assert response.status_code == 400 and "error" in response.json()


def test_a_bad_idempotency_key_is_refused(api: Any, job_body: Any) -> None:
    response = api("alice").post(
        "/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="k" * 201
    )
    assert response.status_code == 400 and "Idempotency-Key" in response.json()["error"]["fields"]
    assert Job.objects.count() == 0


BAD_QUOTAS = [
    ("a guarantee above the limit", {"guarantee": 10, "limit": 4}, "guarantee"),
    ("a negative limit", {"guarantee": 0, "limit": -1}, "limit"),
    ("guarantees beyond capacity", {"guarantee": 30, "limit": 32}, "guarantee"),
    ("an unknown team", {"team": "team-z"}, "team"),
    ("an unknown flavor", {"flavor": "tpu"}, "flavor"),
    ("a count as a string", {"guarantee": "8"}, "guarantee"),
]


@pytest.mark.parametrize(("what", "change", "field"), BAD_QUOTAS, ids=[c[0] for c in BAD_QUOTAS])
def test_a_bad_quota_is_refused_and_changes_nothing(
    what: str, change: dict[str, Any], field: str, api: Any
) -> None:
    before = counts()
    body = {"team": "team-a", "flavor": "h100", "guarantee": 8, "limit": 32, **change}
    response = api("root").post("/api/v1/quotas/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert counts() == before
    assert Quota.objects.get(team__slug="team-a", flavor__name="h100").guarantee == 8
