"""Job arrays through the API: one request makes N tasks, each an ordinary job with its index
in its environment; retries are idempotent; the array is read and cancelled as its jobs are."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobArray, JobEvent, JobHold


def _array(job_body: dict[str, Any], spec: Any, **more: Any) -> dict[str, Any]:
    return {**job_body, "array": spec, **more}


def test_an_array_makes_one_task_per_index_with_index_count_and_value_in_its_env(
    api: Any, job_body: Any
) -> None:
    spec = {"start": 0, "end": 4, "step": 2, "values": ["0.1", "0.01", "0.001"]}
    response = api("alice").post("/api/v1/arrays/", _array(job_body, spec), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["size"], body["spec"], body["counts"]["PENDING"]) == (3, "0-4:2", 3)
    tasks = list(Job.objects.filter(array_id=body["id"]).order_by("array_index"))
    assert [t.array_index for t in tasks] == [0, 2, 4]
    assert [t.env["GPUQUEUE_ARRAY_VALUE"] for t in tasks] == ["0.1", "0.01", "0.001"]
    assert {t.env["GPUQUEUE_ARRAY_COUNT"] for t in tasks} == {"3"}
    assert tasks[1].env["GPUQUEUE_ARRAY_INDEX"] == "2"
    assert {(t.team.slug, t.user.username, t.state) for t in tasks} == {
        ("team-a", "alice", JobState.PENDING)
    }
    assert JobEvent.objects.filter(job__in=tasks, to_state=JobState.PENDING).count() == 3
    listed = api("alice").get(f"/api/v1/arrays/{body['id']}/tasks/").json()
    assert [(t["index"], t["state"]) for t in listed] == [
        (0, "PENDING"),
        (2, "PENDING"),
        (4, "PENDING"),
    ]


def test_a_slurm_spec_with_a_cap_holds_all_but_the_first_k_tasks(api: Any, job_body: Any) -> None:
    response = api("alice").post("/api/v1/arrays/", _array(job_body, "0-9%3"), format="json")
    assert response.status_code == 201, response.content
    tasks = Job.objects.filter(array_id=response.json()["id"]).order_by("array_index")
    assert [t.hold for t in tasks] == [""] * 3 + [JobHold.ARRAY_LIMIT] * 7
    waiting = api("alice").get(f"/api/v1/jobs/{tasks[5].pk}/").json()
    assert "runs at most 3 of its tasks at once (%3)" in waiting["pending_reason_text"]


def test_a_retried_array_submission_returns_the_first_array(api: Any, job_body: Any) -> None:
    client = api("alice")
    first = client.post(
        "/api/v1/arrays/", _array(job_body, "0-99"), format="json", HTTP_IDEMPOTENCY_KEY="sweep-1"
    )
    again = client.post(
        "/api/v1/arrays/", _array(job_body, "0-99"), format="json", HTTP_IDEMPOTENCY_KEY="sweep-1"
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert (JobArray.objects.count(), Job.objects.count()) == (1, 100)


@pytest.mark.parametrize(
    ("spec", "field_message"),
    [
        ("0-10001", "At most 10000 tasks"),
        ("5-2", "the end below the start"),
        ("0-9%0", "at least 1"),
        ("a-b", "is not an index or a range"),
        ({"values": ["a"], "start": 0, "end": 3}, "1 given for 4 tasks"),
        ({"start": 0}, "start and end: both"),
        (7, "Must be a string"),
    ],
)
def test_a_bad_array_spec_is_a_400_at_the_field_and_writes_nothing(
    api: Any, job_body: Any, spec: Any, field_message: str
) -> None:
    response = api("alice").post("/api/v1/arrays/", _array(job_body, spec), format="json")
    assert response.status_code == 400, response.content
    assert field_message in " ".join(response.json()["error"]["fields"]["array"])
    assert (JobArray.objects.count(), Job.objects.count()) == (0, 0)


def test_another_teams_array_is_404_and_absent_from_the_list(api: Any, job_body: Any) -> None:
    array_id = api("alice").post("/api/v1/arrays/", _array(job_body, "0-2"), format="json").json()
    array_id = array_id["id"]
    assert api("carol").get(f"/api/v1/arrays/{array_id}/").status_code == 404
    assert api("carol").post(f"/api/v1/arrays/{array_id}/cancel/", {}).status_code == 404
    assert api("carol").get("/api/v1/arrays/").json()["results"] == []
    assert [a["id"] for a in api("bob").get("/api/v1/arrays/").json()["results"]] == [array_id]
    assert api(None).get("/api/v1/arrays/").status_code in (401, 403)


def test_an_array_without_a_team_goes_to_the_only_team_or_is_refused_at_team(
    api: Any, job_body: Any, world: Any
) -> None:
    from gpuqueue.services.jobs.submit import TEAM_REQUIRED
    from teams.models import Membership, Role

    body = {key: value for key, value in _array(job_body, "0-2").items() if key != "team"}
    created = api("alice").post("/api/v1/arrays/", body, format="json")
    assert created.status_code == 201, created.content
    assert JobArray.objects.get().team == world.team_a
    Membership.objects.create(user=world.alice, team=world.team_b, role=Role.MEMBER)
    refused = api("alice").post("/api/v1/arrays/", body, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"] == {"team": [TEAM_REQUIRED]}
    assert JobArray.objects.count() == 1 and Job.objects.count() == 3


def test_carol_cannot_submit_an_array_to_team_a(api: Any, job_body: Any) -> None:
    response = api("carol").post("/api/v1/arrays/", _array(job_body, "0-2"), format="json")
    assert response.status_code == 400
    assert "team" in response.json()["error"]["fields"]
    assert Job.objects.count() == 0


def test_cancel_some_tasks_by_index_then_all_the_rest(api: Any, job_body: Any) -> None:
    client = api("alice")
    array = client.post("/api/v1/arrays/", _array(job_body, "0-9"), format="json").json()
    url = f"/api/v1/arrays/{array['id']}/cancel/"
    some = client.post(url, {"indices": "0-2,7"}, format="json")
    assert some.status_code == 200, some.content
    assert some.json()["counts"]["CANCELLED"] == 4
    cancelled = Job.objects.filter(array_id=array["id"], state=JobState.CANCELLED)
    assert sorted(cancelled.values_list("array_index", flat=True)) == [0, 1, 2, 7]
    rest = client.post(url, {"states": ["pending"]}, format="json").json()
    assert rest["counts"]["CANCELLED"] == 10 and rest["counts"]["PENDING"] == 0
    assert JobEvent.objects.filter(to_state=JobState.CANCELLED).count() == 10


def test_only_the_submitter_a_team_admin_or_a_site_admin_cancel_an_array(
    api: Any, job_body: Any, world: Any
) -> None:
    from django.contrib.auth import get_user_model

    from teams.models import Membership, Role

    dave = get_user_model().objects.create_user("dave")
    Membership.objects.create(user=dave, team=world.team_a, role=Role.MEMBER)
    array = api("bob").post("/api/v1/arrays/", _array(job_body, "0-3"), format="json").json()
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(dave)
    refused = client.post(f"/api/v1/arrays/{array['id']}/cancel/", {}, format="json")
    assert refused.status_code == 403
    assert Job.objects.filter(state=JobState.CANCELLED).count() == 0
    ok = api("root").post(f"/api/v1/arrays/{array['id']}/cancel/", {"indices": "1"}, format="json")
    assert ok.status_code == 200 and ok.json()["counts"]["CANCELLED"] == 1


def test_a_bad_cancel_body_is_a_400(api: Any, job_body: Any) -> None:
    array = api("alice").post("/api/v1/arrays/", _array(job_body, "0-3"), format="json").json()
    url = f"/api/v1/arrays/{array['id']}/cancel/"
    bad = api("alice").post(url, {"states": ["sleeping"], "what": 1}, format="json")
    assert bad.status_code == 400
    assert Job.objects.filter(state=JobState.CANCELLED).count() == 0


def test_the_list_counts_each_arrays_tasks_in_a_query_count_that_does_not_grow(
    api: Any, job_body: Any
) -> None:
    client = api("alice")
    first = client.post("/api/v1/arrays/", _array(job_body, "0-3"), format="json").json()
    client.post(f"/api/v1/arrays/{first['id']}/cancel/", {"indices": "0"}, format="json")
    with CaptureQueriesContext(connection) as one:
        client.get("/api/v1/arrays/")
    client.post("/api/v1/arrays/", _array(job_body, "0-1"), format="json")
    client.post("/api/v1/arrays/", _array(job_body, "0-2"), format="json")
    with CaptureQueriesContext(connection) as three:
        listed = client.get("/api/v1/arrays/").json()["results"]
    counts = {a["size"]: (a["counts"]["PENDING"], a["counts"]["CANCELLED"]) for a in listed}
    assert counts == {4: (3, 1), 2: (2, 0), 3: (3, 0)}
    assert len(three) == len(one)
