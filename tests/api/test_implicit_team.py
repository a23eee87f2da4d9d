"""A submission without `team`: the submitter's only team, decided when the job is written
(one statement with the insert), with the same answers as a lookup beforehand."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.models import Job, JobEvent

TEAM_REQUIRED = {"team": ["Required: you belong to several teams (or none)."]}


@pytest.fixture
def body(job_body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in job_body.items() if key != "team"}


def _refused_for_team(response: Any) -> bool:
    error = response.json()["error"]
    return (
        response.status_code == 400
        and error["code"] == "invalid"
        and error["message"] == "The request is invalid; see fields."
        and error["fields"] == TEAM_REQUIRED
    )


def test_a_member_of_one_team_submits_to_it(api: Any, body: Any, world: Any) -> None:
    response = api("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["team"] == "team-a" and response.json()["user"] == "alice"
    job = Job.objects.get()
    assert job.team == world.team_a and job.user == world.alice
    assert JobEvent.objects.get().job == job


def test_the_job_reads_back_as_one_with_its_team_named(api: Any, body: Any) -> None:
    client = api("alice")
    implicit = client.post("/api/v1/jobs/", body, format="json").json()
    named = client.post("/api/v1/jobs/", {**body, "team": "team-a"}, format="json").json()
    again = client.get(f"/api/v1/jobs/{implicit['id']}/").json()
    # GET adds the job's dependency links (none here) to what the submission answered.
    assert (again.pop("depends_on"), again.pop("dependents")) == ([], [])
    for read in (named, again):
        assert {k: v for k, v in implicit.items() if k not in ("id", "submitted_at")} == {
            k: v for k, v in read.items() if k not in ("id", "submitted_at")
        }


def test_a_member_of_two_teams_must_name_one(api: Any, body: Any, world: Any) -> None:
    from teams.models import Membership, Role

    Membership.objects.create(user=world.alice, team=world.team_b, role=Role.MEMBER)
    assert _refused_for_team(api("alice").post("/api/v1/jobs/", body, format="json"))
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_a_second_team_counts_at_once(api: Any, body: Any, world: Any) -> None:
    """Nothing about the submitter's teams is kept between submissions."""
    from teams.models import Membership, Role

    client = api("alice")
    assert client.post("/api/v1/jobs/", body, format="json").status_code == 201
    Membership.objects.create(user=world.alice, team=world.team_b, role=Role.MEMBER)
    assert _refused_for_team(client.post("/api/v1/jobs/", body, format="json"))
    Membership.objects.filter(user=world.alice, team=world.team_a).delete()
    moved = client.post("/api/v1/jobs/", body, format="json")
    assert moved.status_code == 201 and moved.json()["team"] == "team-b"


def test_a_user_in_no_team_must_name_one(api: Any, body: Any, world: Any) -> None:
    from teams.models import Membership

    Membership.objects.filter(user=world.alice).delete()
    assert _refused_for_team(api("alice").post("/api/v1/jobs/", body, format="json"))
    assert not Job.objects.exists()


def test_a_site_admin_must_name_a_team_when_there_are_several(api: Any, body: Any) -> None:
    assert _refused_for_team(api("root").post("/api/v1/jobs/", body, format="json"))


def test_a_site_admin_submits_to_the_only_team(api: Any, body: Any, world: Any) -> None:
    """A site admin may submit to any team, member or not; with one team that is the one."""
    from gpuqueue.models import Quota

    Quota.objects.filter(team=world.team_b).delete()
    world.team_b.delete()
    response = api("root").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["team"] == "team-a" and response.json()["user"] == "root"


def test_the_missing_team_is_reported_before_a_worker_too_large(
    api: Any, body: Any, world: Any
) -> None:
    from teams.models import Membership, Role

    too_large = {**body, "gpus_per_worker": 12}
    response = api("alice").post("/api/v1/jobs/", too_large, format="json")
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"gpus_per_worker"}
    Membership.objects.create(user=world.alice, team=world.team_b, role=Role.MEMBER)
    assert _refused_for_team(api("alice").post("/api/v1/jobs/", too_large, format="json"))


def test_a_retry_returns_the_first_job_even_once_the_team_is_ambiguous(
    api: Any, body: Any, world: Any
) -> None:
    from teams.models import Membership, Role

    client = api("alice")
    first = client.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    Membership.objects.create(user=world.alice, team=world.team_b, role=Role.MEMBER)
    retry = client.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert (first.status_code, retry.status_code) == (201, 200)
    assert retry.json()["id"] == first.json()["id"] and retry.json()["team"] == "team-a"
    assert Job.objects.count() == 1


def test_a_retry_without_the_team_returns_the_job_made_with_it(api: Any, body: Any) -> None:
    client = api("alice")
    first = client.post(
        "/api/v1/jobs/", {**body, "team": "team-a"}, format="json", HTTP_IDEMPOTENCY_KEY="k2"
    )
    retry = client.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="k2")
    assert (first.status_code, retry.status_code) == (201, 200)
    assert retry.json()["id"] == first.json()["id"] and Job.objects.count() == 1
