"""What the API shows of a job backing off after failed starts, and flavor tolerations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from gpuqueue.client.cli import describe
from gpuqueue.core.states import JobState
from gpuqueue.models import Flavor, Job
from gpuqueue.services.jobs.start_failures import requeue_after_start_failure

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def test_a_backing_off_job_says_until_when(api: Any, submit: Any, settings: Any) -> None:
    settings.GPUQUEUE_START_BACKOFF_SECONDS = 30
    job = submit()
    Job.objects.filter(pk=job.pk).update(state=JobState.ADMITTED, attempts=1)
    job.refresh_from_db()
    with transaction.atomic():
        requeue_after_start_failure(job, "pods refused: exceeded quota", NOW)

    body = api("alice").get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["state"] == "PENDING"
    assert body["start_failures"] == 1
    assert body["not_before"] == "2030-01-01T12:00:30Z"
    assert body["pending_reason"]["code"] == "backing_off"
    assert body["pending_reason_text"] == (
        "Backing off: 1 of 5 allowed start attempts failed (pods refused: exceeded quota); "
        "not considered for admission before 2030-01-01 12:00:30 UTC."
    )
    assert api("carol").get(f"/api/v1/jobs/{job.pk}/").status_code == 404
    events = api("alice").get(f"/api/v1/jobs/{job.pk}/events/").json()
    listed = events["results"] if isinstance(events, dict) else events
    assert listed[-1]["reason"] == (
        "pods refused: exceeded quota; retrying in 30 s (start attempt 1 of 5)"
    )


def test_the_job_page_and_the_cli_show_why_the_job_backs_off(
    api: Any, submit: Any, client: Any, world: Any
) -> None:
    job = submit()
    Job.objects.filter(pk=job.pk).update(state=JobState.ADMITTED, attempts=1)
    job.refresh_from_db()
    with transaction.atomic():
        requeue_after_start_failure(job, "pods refused: exceeded quota: gpus", NOW)

    client.force_login(world.alice)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Backing off" in page and "exceeded quota: gpus" in page
    shown = describe(api("alice").get(f"/api/v1/jobs/{job.pk}/").json())  # `gpuqueue status`
    assert "why: Backing off: 1 of 5" in shown and "exceeded quota: gpus" in shown


def test_a_site_admin_sets_tolerations_and_everyone_reads_them(api: Any) -> None:
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
    root = api("root")
    created = root.post(
        "/api/v1/flavors/",
        {"name": "h100-ml", "resource_name": "nvidia.com/gpu", "tolerations": tolerations},
        format="json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["tolerations"] == tolerations
    assert Flavor.objects.get(name="h100-ml").tolerations == tolerations
    assert api("alice").get("/api/v1/flavors/h100-ml/").json()["tolerations"] == tolerations

    changed = root.patch("/api/v1/flavors/h100-ml/", {"tolerations": []}, format="json")
    assert changed.status_code == 200 and changed.json()["tolerations"] == []
    assert (
        api("bob")
        .patch("/api/v1/flavors/h100-ml/", {"tolerations": tolerations}, format="json")
        .status_code
        == 403
    )


def test_invalid_tolerations_are_refused_at_the_field(api: Any) -> None:
    response = api("root").patch(
        "/api/v1/flavors/h100/",
        {"tolerations": [{"key": "dedicated", "operator": "Exists", "value": "ml"}]},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {
        "tolerations": ["Toleration 1: the operator Exists takes no value (got 'ml')."]
    }
    assert Flavor.objects.get(name="h100").tolerations == []

    not_text = api("root").patch(
        "/api/v1/flavors/h100/", {"tolerations": [{"key": 5}]}, format="json"
    )
    assert not_text.status_code == 400 and "tolerations" in str(not_text.json()["error"]["fields"])
