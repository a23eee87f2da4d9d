"""Refusals that say what happened and change nothing: an idempotency key reused with another
body, cancelling a job that has ended, and a job that is not there (or not yours to see)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobArray
from gpuqueue.services.jobs.transitions import transition

pytestmark = pytest.mark.django_db


def post(client: Any, path: str, body: dict[str, Any], key: str) -> Any:
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_a_key_reused_with_another_body_is_refused_with_422(
    api: Any, job_body: dict[str, Any]
) -> None:
    alice = api("alice")
    first = post(alice, "/api/v1/jobs/", job_body, "nightly-1")
    other = post(alice, "/api/v1/jobs/", {**job_body, "workers": 2}, "nightly-1")
    assert (first.status_code, other.status_code) == (201, 422)
    job_id = first.json()["id"]
    assert other.json()["error"] == {
        "code": "idempotency_key_reused",
        "message": f"Idempotency-Key 'nightly-1' was already used for job {job_id} with a "
        f"different request body. Send the same body to get job {job_id} back, or use a new "
        "key for a new job.",
    }
    assert Job.objects.count() == 1


def test_the_same_body_in_another_order_still_returns_the_first_job(
    api: Any, job_body: dict[str, Any]
) -> None:
    alice = api("alice")
    first = post(alice, "/api/v1/jobs/", job_body, "k")
    again = post(alice, "/api/v1/jobs/", dict(reversed(list(job_body.items()))), "k")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]


def test_a_key_reused_with_a_body_that_no_longer_validates_is_refused(
    api: Any, job_body: dict[str, Any]
) -> None:
    alice = api("alice")
    assert post(alice, "/api/v1/jobs/", job_body, "k").status_code == 201
    other = post(alice, "/api/v1/jobs/", {**job_body, "workers": "abc"}, "k")
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"


def test_an_array_key_reused_with_another_body_is_refused(
    api: Any, job_body: dict[str, Any]
) -> None:
    alice = api("alice")
    first = post(alice, "/api/v1/arrays/", {**job_body, "array": "0-3"}, "a")
    same = post(alice, "/api/v1/arrays/", {**job_body, "array": "0-3"}, "a")
    other = post(alice, "/api/v1/arrays/", {**job_body, "array": "0-7"}, "a")
    assert (first.status_code, same.status_code, other.status_code) == (201, 200, 422)
    assert "already used for array" in other.json()["error"]["message"]
    assert JobArray.objects.count() == 1


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (JobState.CANCELLED, "is already cancelled."),
        (JobState.SUCCEEDED, "has already finished (succeeded)."),
        (JobState.FAILED, "has already failed."),
    ],
)
def test_cancelling_a_job_that_ended_says_so(
    api: Any, submit: Any, world: Any, state: str, message: str
) -> None:
    job = submit(world.alice)
    if state == JobState.CANCELLED:
        transition(job, state, reason="cancelled", actor="user:alice")
    else:
        transition(job, JobState.ADMITTED, reason="fits", actor="cycle", placement={"h100-0": 1})
        transition(job, JobState.RUNNING, reason="running", actor="cluster")
        transition(job, state, reason="ended", actor="cluster")
    response = api("alice").post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "invalid_transition",
        "message": f"Job {job.pk} {message}",
    }


@pytest.mark.parametrize("path", ["/api/v1/jobs/{id}/", "/api/v1/jobs/{id}/cancel/"])
def test_a_missing_or_hidden_job_says_which_in_the_error_shape(
    api: Any, submit: Any, world: Any, path: str
) -> None:
    carols = submit(world.carol, team=world.team_b)
    for job_id in (carols.pk, 999999):
        method = "post" if path.endswith("cancel/") else "get"
        response = getattr(api("alice"), method)(path.format(id=job_id))
        assert response.status_code == 404
        assert response.json() == {
            "error": {"code": "not_found", "message": f"No job {job_id} (or you may not see it)."}
        }


def test_a_missing_array_is_named_too(api: Any) -> None:
    response = api("alice").get("/api/v1/arrays/4242/")
    assert response.json()["error"]["message"] == "No job array 4242 (or you may not see it)."


def test_a_key_reused_for_another_team_is_refused(
    api: Any, job_body: dict[str, Any], world: Any
) -> None:
    from teams.models import Membership, Role

    Membership.objects.create(user=world.alice, team=world.team_b, role=Role.MEMBER)
    alice = api("alice")
    assert post(alice, "/api/v1/jobs/", job_body, "t").status_code == 201
    other = post(alice, "/api/v1/jobs/", {**job_body, "team": "team-b"}, "t")
    assert other.status_code == 422
