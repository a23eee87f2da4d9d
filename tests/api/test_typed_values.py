"""What a person types into the numbers of a submission: letters are refused at the field,
durations are read in any of the ways people write them, and a bad one says how to write it."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.models import Job

pytestmark = pytest.mark.django_db

DURATION_FIELDS = ("max_runtime_seconds", "expected_runtime_seconds", "checkpoint_grace_seconds")


@pytest.mark.parametrize("field", ["workers", "priority", "gpus_per_worker"])
def test_letters_in_an_integer_are_refused_at_the_field(
    api: Any, job_body: dict[str, Any], field: str
) -> None:
    response = api("alice").post("/api/v1/jobs/", {**job_body, field: "abc"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {field: ["Must be an integer."]}
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("typed", "seconds"),
    [
        ("90m", 5400),
        ("2h", 7200),
        ("1:30:00", 5400),
        ("45s", 45),
        ("1d", 86400),
        ("600", 600),
        (600, 600),
    ],
)
@pytest.mark.parametrize("field", DURATION_FIELDS)
def test_every_duration_field_reads_a_duration(
    api: Any, job_body: dict[str, Any], field: str, typed: Any, seconds: int
) -> None:
    response = api("alice").post("/api/v1/jobs/", {**job_body, field: typed}, format="json")
    assert response.status_code == 201, response.json()
    assert getattr(Job.objects.get(), field) == seconds


@pytest.mark.parametrize("field", DURATION_FIELDS)
def test_a_bad_duration_is_refused_at_its_field_saying_how_to_write_one(
    api: Any, job_body: dict[str, Any], field: str
) -> None:
    response = api("alice").post("/api/v1/jobs/", {**job_body, field: "2 weeks"}, format="json")
    assert response.status_code == 400
    (message,) = response.json()["error"]["fields"][field]
    assert message.startswith("'2 weeks' is no duration; write seconds (5400) or")
    assert not Job.objects.exists()


def test_a_duration_is_bounded_as_seconds_are(api: Any, job_body: dict[str, Any]) -> None:
    too_long = api("alice").post(
        "/api/v1/jobs/", {**job_body, "max_runtime_seconds": f"{10**5}d"}, format="json"
    )
    assert too_long.status_code == 400
    assert "max_runtime_seconds" in too_long.json()["error"]["fields"]
