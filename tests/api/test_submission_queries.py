"""How much a submission asks of PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("with_team", [True, False])
def test_an_api_submission_makes_one_query_and_one_commit(
    api: Any, job_body: Any, with_team: bool
) -> None:
    """One statement writing the job and its event (a used idempotency key makes it insert
    nothing). The token, the team, the flavor and its largest node were read by the first
    submission and are kept while the cache epoch in Redis is unchanged
    (gpuqueue.core.caches). Without `team`, the same statement finds the submitter's only
    team: no lookup of the team beforehand. (A regression guard: each ORM query here cost
    0.3 to 0.9 ms of CPU; see gpuqueue/services/jobs/submission_sql.py.)"""
    if not with_team:
        job_body = {key: value for key, value in job_body.items() if key != "team"}
    client = api("alice")
    assert client.post("/api/v1/jobs/", job_body, format="json").status_code == 201
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="q-1")
    assert response.status_code == 201
    statements = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    assert statements == ["WITH"], statements


def test_a_member_removed_after_a_lookup_is_refused_at_once(
    api: Any, job_body: Any, world: Any
) -> None:
    from gpuqueue.models import Job
    from teams.models import Membership

    client = api("alice")
    assert client.post("/api/v1/jobs/", job_body, format="json").status_code == 201
    Membership.objects.filter(user=world.alice, team=world.team_a).delete()
    response = client.post("/api/v1/jobs/", job_body, format="json")
    # The removal renewed the cache epoch: refused as any non-member is, as with the caches off.
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == {"team": ["Unknown team team-a."]}
    assert Job.objects.count() == 1


def test_a_retry_after_the_user_left_the_team_returns_the_first_job(
    api: Any, job_body: Any, world: Any
) -> None:
    """The body no longer validates (the removal renewed the cache epoch, and the team is
    unknown to a non-member); the earlier job with the same key is found."""
    from gpuqueue.models import Job, JobEvent
    from teams.models import Membership

    client = api("alice")
    first = client.post("/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="left")
    Membership.objects.filter(user=world.alice, team=world.team_a).delete()
    retry = client.post("/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="left")
    assert (first.status_code, retry.status_code) == (201, 200), retry.content
    assert retry.json()["id"] == first.json()["id"]
    assert Job.objects.count() == 1 and JobEvent.objects.count() == 1


def test_a_used_key_with_a_body_that_does_not_validate_is_refused_as_reused(
    api: Any, job_body: Any
) -> None:
    from gpuqueue.models import Job

    client = api("alice")
    client.post("/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="r")
    broken = {**job_body, "workers": 0}
    retry = client.post("/api/v1/jobs/", broken, format="json", HTTP_IDEMPOTENCY_KEY="r")
    assert retry.status_code == 422
    assert retry.json()["error"]["code"] == "idempotency_key_reused"
    fresh = client.post("/api/v1/jobs/", broken, format="json", HTTP_IDEMPOTENCY_KEY="r2")
    assert fresh.status_code == 400 and set(fresh.json()["error"]["fields"]) == {"workers"}
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)  # the foreign key is checked at commit
def test_a_flavor_deleted_after_a_lookup_is_refused_as_unknown(
    api: Any, job_body: Any, world: Any
) -> None:
    from gpuqueue.models import Flavor, Job, Quota

    client = api("alice")
    l4 = {**job_body, "flavor": "l4"}
    assert client.post("/api/v1/jobs/", l4, format="json").status_code == 201
    Job.objects.filter(flavor=world.l4).delete()
    Quota.objects.filter(flavor=world.l4).delete()
    Flavor.objects.filter(pk=world.l4.pk).delete()
    response = client.post("/api/v1/jobs/", l4, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == {"flavor": ["Unknown flavor l4."]}
    assert Job.objects.count() == 0
