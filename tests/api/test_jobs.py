"""Jobs over the API: submit (idempotently), list with filters and cursors, read the reason as
a sentence and as data, cancel, events."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobEvent
from tests.standings import show


def test_a_retry_with_the_same_key_returns_the_first_job_with_200(api: Any, job_body: Any) -> None:
    alice = api("alice")
    first = alice.post("/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="nightly-1")
    again = alice.post("/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="nightly-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.count() == 1


def test_the_same_key_from_another_user_is_another_job(api: Any, job_body: Any) -> None:
    a = api("alice").post("/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    b = api("bob").post("/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert (a.status_code, b.status_code) == (201, 201)
    assert a.json()["id"] != b.json()["id"]


def test_without_a_key_every_submission_is_a_new_job(api: Any, job_body: Any) -> None:
    for _ in range(2):
        assert api("alice").post("/api/v1/jobs/", job_body, format="json").status_code == 201
    assert Job.objects.count() == 2


def test_the_team_may_be_left_out_by_a_member_of_one_team(api: Any, job_body: Any) -> None:
    del job_body["team"]
    response = api("carol").post("/api/v1/jobs/", job_body, format="json")
    assert response.status_code == 201 and response.json()["team"] == "team-b"


def test_a_pending_job_reads_its_reason_as_a_sentence_and_as_data(api: Any, submit: Any) -> None:
    job = submit(workers=4, gpus_per_worker=2)
    reason = {
        "code": "no_capacity",
        "numbers": {
            "flavor": "h100",
            "workers": 4,
            "gpus_per_worker": 2,
            "workers_fit_now": 3,
            "free": 6,
        },
    }
    start = timezone.now() + timedelta(minutes=20)
    Job.objects.filter(pk=job.pk).update(estimated_start=start)
    show(job.pk, reason=reason, queue_position=2, cluster_position=5)
    body = api("alice").get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["pending_reason"] == reason
    assert "8 h100 GPUs" in body["pending_reason_text"] and "6" in body["pending_reason_text"]
    assert (body["queue_position"], body["cluster_position"]) == (2, 5)
    assert body["estimated_start"] is not None and body["attempts"] == 0
    assert body["placement"] == {} and body["gpus"] == 8


def test_list_filters_by_team_state_user_flavor_and_time(api: Any, world: Any, submit: Any) -> None:
    a1 = submit(world.alice)
    submit(world.bob, flavor=world.l4)
    carol = submit(world.carol, team=world.team_b)
    Job.objects.filter(pk=a1.pk).update(state=JobState.RUNNING)
    root = api("root")

    def ids(query: str) -> set[int]:
        return {j["id"] for j in root.get(f"/api/v1/jobs/?{query}").json()["results"]}

    assert ids("team=team-b") == {carol.pk}
    assert ids("state=RUNNING") == {a1.pk}
    assert len(ids("state=RUNNING&state=PENDING")) == 3
    assert ids("user=alice") == {a1.pk}
    assert len(ids("flavor=l4")) == 1
    later = (timezone.now() + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert ids(f"submitted_after={later}") == set()
    assert len(ids(f"submitted_before={later}")) == 3
    assert api("alice").get("/api/v1/jobs/?mine=true").json()["results"][0]["id"] == a1.pk
    # Alice sees her team's jobs, never team-b's, whatever the filter says.
    alice_ids = {j["id"] for j in api("alice").get("/api/v1/jobs/?team=team-b").json()["results"]}
    assert alice_ids == set()
    assert api("root").get("/api/v1/jobs/?state=NOPE").status_code == 400


def test_states_are_one_vocabulary_in_any_case_and_a_wrong_one_lists_them(
    api: Any, world: Any, submit: Any
) -> None:
    running = submit(world.alice)
    pending = submit(world.alice)
    Job.objects.filter(pk=running.pk).update(state=JobState.RUNNING)
    root = api("root")

    def ids(query: str) -> set[int]:
        response = root.get(f"/api/v1/jobs/?{query}")
        assert response.status_code == 200, response.content
        return {j["id"] for j in response.json()["results"]}

    assert ids("state=running") == ids("state=Running") == ids("state=RUNNING") == {running.pk}
    assert ids("state=active") == ids("state=ACTIVE") == {running.pk, pending.pk}
    assert ids("state=holding") == {running.pk}
    assert ids("state=finished") == set()
    wrong = root.get("/api/v1/jobs/?state=pendin").json()["error"]
    message = wrong["fields"]["state"][0]
    assert "Unknown state 'pendin'" in message and "pending" in message and "finished" in message


def test_an_unknown_query_parameter_is_refused_naming_the_known_ones(api: Any) -> None:
    response = api("root").get("/api/v1/jobs/?nmae=train")
    assert response.status_code == 400
    message = response.json()["error"]["fields"]["nmae"][0]
    assert "Unknown query parameter 'nmae'" in message
    assert "state" in message and "team" in message and "cursor" in message
    assert api("root").get("/api/v1/jobs/?page_size=2&state=pending").status_code == 200
    assert api("root").get("/api/v1/memberships/?teem=x").status_code == 400


def test_cursor_pages_cover_every_job_once(api: Any, submit: Any) -> None:
    made = {submit().pk for _ in range(7)}
    seen: list[int] = []
    url = "/api/v1/jobs/?page_size=3"
    client = api("alice")
    while url:
        page = client.get(url).json()
        seen += [j["id"] for j in page["results"]]
        url = page["next"]
    assert sorted(seen) == sorted(made) and len(seen) == 7
    assert seen == sorted(seen, reverse=True)


def test_cancel_then_cancel_again_is_a_conflict(api: Any, submit: Any) -> None:
    job = submit()
    client = api("alice")
    assert client.post(f"/api/v1/jobs/{job.pk}/cancel/").json()["state"] == "CANCELLED"
    again = client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_transition"
    events = client.get(f"/api/v1/jobs/{job.pk}/events/").json()
    assert [e["to_state"] for e in events] == ["PENDING", "CANCELLED"]
    assert events[1]["actor"] == "user:alice"


def test_a_retry_returns_the_first_job_even_if_the_cluster_changed(
    api: Any, job_body: Any, nodes: Any
) -> None:
    client = api("alice")
    body = {**job_body, "gpus_per_worker": 8}
    assert (
        client.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="x").status_code
        == 201
    )
    from gpuqueue.models import Node

    Node.objects.filter(name__startswith="h100").update(capacity={"nvidia.com/gpu": 4})
    retry = client.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="x")
    assert retry.status_code == 200 and JobEvent.objects.count() == 1
