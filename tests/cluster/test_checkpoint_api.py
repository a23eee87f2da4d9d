"""`POST /api/v1/jobs/{id}/checkpointed/` with the per-job token, and `GET /healthz`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from gpuqueue.core.cluster_health import record_cluster
from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobEvent
from gpuqueue.services.jobs.checkpoint import issue_job_token
from teams.services import create_token


def url(job: Job) -> str:
    return f"/api/v1/jobs/{job.pk}/checkpointed/"


@pytest.fixture
def preempting(world: Any, submit: Any) -> Job:
    job = submit()
    now = datetime.now(UTC)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.PREEMPTING,
        attempts=1,
        admitted_at=now,
        checkpoint_requested_at=now,
        checkpoint_deadline=now + timedelta(minutes=2),
    )
    job.refresh_from_db()
    return job


def post(job: Job, token: str | None, location: str = "s3://ckpt/1") -> Any:
    client = APIClient()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post(url(job), {"location": location}, format="json", **headers)


def test_the_jobs_own_token_acknowledges_its_checkpoint_once_with_an_event(preempting: Job) -> None:
    token = issue_job_token(preempting)
    first = post(preempting, token)
    again = post(preempting, token)  # a retry after a lost answer is the same success

    assert first.status_code == 200 and first.json()["acknowledged"] is True
    assert again.status_code == 200
    preempting.refresh_from_db()
    assert preempting.checkpoint_location == "s3://ckpt/1" and preempting.checkpoint_acked_at
    (event,) = JobEvent.objects.filter(job=preempting, reason__startswith="checkpoint acknowledged")
    assert event.actor == "workload"


def test_a_token_of_another_job_is_told_nothing(preempting: Job, submit: Any) -> None:
    other = submit()
    response = post(preempting, issue_job_token(other))
    assert response.status_code == 404
    preempting.refresh_from_db()
    assert preempting.checkpoint_acked_at is None


@pytest.mark.parametrize("how", ["none", "forged", "user token", "session"])
def test_only_a_job_token_is_accepted(preempting: Job, world: Any, how: str) -> None:
    issue_job_token(preempting)
    client = APIClient()
    headers = {}
    if how == "forged":
        headers["HTTP_AUTHORIZATION"] = f"Bearer gqj_{preempting.pk}_guessed"
    elif how == "user token":
        _, secret = create_token(world.alice, name="ci", actor=world.alice)
        headers["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    elif how == "session":
        client.force_login(world.root)
    response = client.post(url(preempting), {"location": "x"}, format="json", **headers)
    assert response.status_code == 401


def test_a_job_that_is_not_being_preempted_answers_409(world: Any, submit: Any) -> None:
    job = submit()
    response = post(job, issue_job_token(job))
    assert response.status_code == 409 and response.json()["error"]["code"] == "not_preempting"


def test_a_location_is_required(preempting: Job) -> None:
    assert post(preempting, issue_job_token(preempting), location="").status_code == 400


def test_healthz_reports_database_redis_and_the_cluster(
    db: Any, settings: Any, django_user_model: Any
) -> None:
    settings.GPUQUEUE_CLUSTER_BACKEND = "kubernetes"
    record_cluster(False, "list nodes: HTTP 503: apiserver unavailable")
    assert APIClient().get("/healthz").json() == {"status": "degraded"}  # anonymous: no detail
    client = APIClient()
    client.force_login(django_user_model.objects.create_user("ops"))
    body = client.get("/healthz").json()
    assert body["database"]["status"] == "ok" and body["redis"]["status"] == "ok"
    assert body["cluster"]["status"] == "unreachable" and "503" in body["cluster"]["detail"]
    assert body["status"] == "degraded"

    record_cluster(True)
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["cluster"]["status"] == "ok"


def test_a_running_job_registers_its_saves_and_the_newest_is_the_one_it_resumes_from(
    preempting: Job,
) -> None:
    """A workload that saves on its own (periodically, or on SIGTERM while its node drains)
    registers each save; a later acknowledgement or requeue keeps the newest."""
    Job.objects.filter(pk=preempting.pk).update(
        state=JobState.RUNNING, checkpoint_requested_at=None, checkpoint_deadline=None
    )
    token = issue_job_token(preempting)
    for step in (100, 200):
        response = post(preempting, token, location=f"s3://ckpt/step-{step}")
        assert response.status_code == 200, response.content
        assert response.json() == {
            "job": preempting.pk,
            "acknowledged": False,
            "registered": True,
            "location": f"s3://ckpt/step-{step}",
        }
    preempting.refresh_from_db()
    assert preempting.checkpoint_location == "s3://ckpt/step-200"
    assert preempting.checkpoint_acked_at is None and preempting.state == JobState.RUNNING
    assert not JobEvent.objects.filter(job=preempting, reason__startswith="checkpoint")
