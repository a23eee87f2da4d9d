"""Idle GPUs found: the rule, the simulated profile, the flag in the API and /metrics, and the
used and idle GPU-seconds in the ledger (services/accounting/gpu_activity.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuqueue.core.gpu_idle import (
    IdleRule,
    below_since,
    idle_words,
    is_idle,
    profile_errors,
    profile_utilization,
)
from gpuqueue.core.states import JobState
from gpuqueue.models import JobActivity, UsageRecord
from gpuqueue.services.accounting.gpu_activity import sample_gpu_activity
from gpuqueue.services.accounting.usage_ledger import record_open_attempts
from gpuqueue.services.jobs.admissions import Admitted, admit_all
from gpuqueue.services.jobs.transitions import transition

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
RULE = IdleRule(threshold_percent=5, minutes=30)


def test_below_the_threshold_counts_from_the_first_low_reading_and_any_high_one_resets() -> None:
    since = below_since(None, 3.0, RULE, T0)
    assert since == T0
    assert below_since(since, 4.9, RULE, T0 + timedelta(minutes=10)) == T0
    assert not is_idle(since, RULE, T0 + timedelta(minutes=29))
    assert is_idle(since, RULE, T0 + timedelta(minutes=30))
    assert below_since(since, 5.0, RULE, T0 + timedelta(minutes=31)) is None


def test_the_owner_reads_how_many_gpus_how_low_and_how_long() -> None:
    assert (
        idle_words(8, 5, T0, T0 + timedelta(minutes=47))
        == "its 8 GPUs have been below 5 % utilization for 47 min"
    )
    assert idle_words(1, 2.5, T0, T0 + timedelta(hours=3)) == (
        "its GPU has been below 2.5 % utilization for 3.0 h"
    )


def test_a_profile_steps_every_ten_minutes_and_holds_its_last_value() -> None:
    assert profile_utilization("85,40,2", timedelta(minutes=9)) == 85
    assert profile_utilization("85,40,2", timedelta(minutes=10)) == 40
    assert profile_utilization("85,40,2", timedelta(days=2)) == 2
    assert profile_errors("85,x") and profile_errors("101") and profile_errors("")
    assert profile_utilization("nan", timedelta()) is None


@pytest.fixture
def running(world: Any, submit: Any, settings: Any) -> Any:
    """A running 2 × 4 GPU job whose simulated GPUs are busy 10 minutes, then at 2 %."""
    settings.GPUQUEUE_CLUSTER_BACKEND = "simulated"
    settings.GPUQUEUE_PROMETHEUS_URL = None
    settings.GPUQUEUE_IDLE_THRESHOLD_PERCENT = 5.0
    settings.GPUQUEUE_IDLE_MINUTES = 30
    job = submit(
        workers=2, gpus_per_worker=4, annotations={"gpuqueue.dev/sim-gpu-utilization": "85,2"}
    )
    admit_all([Admitted(job.pk, {"h100-0": 1, "h100-1": 1}, False)], T0, "cycle")
    job.refresh_from_db()
    assert transition(job, JobState.RUNNING, reason="running", actor="test", started_at=T0)
    return job


def _tick(minutes: float) -> None:
    now = T0 + timedelta(minutes=minutes)
    record_open_attempts(now)
    sample_gpu_activity(now)


def test_a_job_below_the_threshold_long_enough_is_flagged_in_words_and_in_the_ledger(
    running: Any, api: Any
) -> None:
    for minute in range(0, 50):
        _tick(minute)
    activity = JobActivity.objects.get(job_id=running.pk)
    assert activity.below_since == T0 + timedelta(minutes=10)
    assert activity.idle  # below since minute 10, flagged from minute 40
    # Held 8 GPUs for 49 minutes; a reading stands for the minute before it: 9 minutes at
    # 85 %, 40 at 2 % (below the threshold).
    row = UsageRecord.objects.get(job_id=running.pk)
    assert row.gpu_seconds == pytest.approx(8 * 49 * 60)
    assert row.used_gpu_seconds == pytest.approx(8 * 60 * (9 * 0.85 + 40 * 0.02))
    assert row.idle_gpu_seconds == pytest.approx(8 * 40 * 60)

    body = api("alice").get(f"/api/v1/jobs/{running.pk}/").json()
    assert body["gpu_activity"]["idle"] is True
    assert body["gpu_activity"]["gpu_utilization"] == 2.0
    assert body["gpu_activity"]["message"].startswith(
        "its 8 GPUs have been below 5 % utilization for"
    )


def test_a_flavor_sets_its_own_threshold_and_minutes(running: Any, world: Any) -> None:
    world.h100.idle_threshold_percent = 1.0  # 2 % is busy enough here
    world.h100.save()
    for minute in range(0, 50):
        _tick(minute)
    assert not JobActivity.objects.get(job_id=running.pk).idle
    world.h100.idle_threshold_percent, world.h100.idle_minutes = 5.0, 5
    world.h100.save()
    _tick(50)  # below its new threshold from now on
    assert not JobActivity.objects.get(job_id=running.pk).idle
    _tick(55)
    assert JobActivity.objects.get(job_id=running.pk).idle


def test_a_busy_job_is_not_flagged_and_a_repeated_minute_adds_nothing(running: Any) -> None:
    _tick(0)
    _tick(5)
    _tick(5)  # a duplicate beat delivery
    activity = JobActivity.objects.get(job_id=running.pk)
    assert (activity.gpu_utilization, activity.below_since, activity.idle) == (85, None, False)
    row = UsageRecord.objects.get(job_id=running.pk)
    assert row.used_gpu_seconds == pytest.approx(8 * 5 * 60 * 0.85)
    assert row.idle_gpu_seconds == 0


def test_idle_jobs_and_gpu_seconds_appear_in_metrics(
    running: Any, client: Any, settings: Any
) -> None:
    settings.GPUQUEUE_METRICS_OPEN = True
    settings.GPUQUEUE_METRICS_TOKEN = None
    for minute in range(0, 45):
        _tick(minute)
    text = client.get("/metrics").content.decode()
    assert 'gpuqueue_idle_jobs{flavor="h100",team="team-a"} 1.0' in text
    assert 'gpuqueue_idle_gpus{flavor="h100",team="team-a"} 8.0' in text
    assert f'gpuqueue_gpu_seconds_held_total{{flavor="h100",team="team-a"}} {8 * 44 * 60.0}' in text
    assert 'gpuqueue_gpu_seconds_idle_total{flavor="h100",team="team-a"}' in text


def test_the_job_list_reads_gpu_activity_for_a_whole_page_at_once(
    running: Any, submit: Any, api: Any
) -> None:
    """Each running job's utilization in the API's job list, with as many queries for four
    running jobs as for one."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def listing() -> tuple[int, list[Any]]:
        with CaptureQueriesContext(connection) as queries:
            response = api("root").get("/api/v1/jobs/", {"state": "RUNNING"})
        assert response.status_code == 200
        return len(queries), [job["gpu_activity"] for job in response.json()["results"]]

    _tick(0)
    _tick(1)
    one, activities = listing()
    assert [a["gpu_utilization"] for a in activities] == [85.0]
    for _ in range(3):
        job = submit(annotations={"gpuqueue.dev/sim-gpu-utilization": "2"})
        admit_all([Admitted(job.pk, {"h100-1": 1}, False)], T0, "cycle")
        job.refresh_from_db()
        assert transition(job, JobState.RUNNING, reason="running", actor="test", started_at=T0)
    _tick(2)
    four, activities = listing()
    assert sorted(a["gpu_utilization"] for a in activities) == [2.0, 2.0, 2.0, 85.0]
    assert four == one


def test_a_minute_of_readings_costs_as_many_queries_for_four_jobs_as_for_one(
    running: Any, submit: Any
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def minute(at: float) -> int:
        record_open_attempts(T0 + timedelta(minutes=at))
        with CaptureQueriesContext(connection) as queries:
            sample_gpu_activity(T0 + timedelta(minutes=at))
        return len(queries)

    minute(0)
    one = minute(1)
    others = []
    for _ in range(3):
        job = submit(annotations={"gpuqueue.dev/sim-gpu-utilization": "2"})
        admit_all([Admitted(job.pk, {"h100-1": 1}, False)], T0, "cycle")
        job.refresh_from_db()
        assert transition(job, JobState.RUNNING, reason="running", actor="test", started_at=T0)
        others.append(job.pk)
    minute(2)
    assert minute(3) == one
    # Each of them had a minute at 2 % (below the threshold) added to its ledger row.
    for row in UsageRecord.objects.filter(job_id__in=others):
        assert row.idle_gpu_seconds == pytest.approx(row.gpus * 60)
        assert row.used_gpu_seconds == pytest.approx(row.gpus * 60 * 0.02)


def test_a_malformed_profile_is_refused_at_submission_with_the_field(
    api: Any, job_body: Any
) -> None:
    body = {**job_body, "annotations": {"gpuqueue.dev/sim-gpu-utilization": "busy"}}
    response = api("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert "sim-gpu-utilization" in str(response.json()["error"]["fields"]["annotations"])


def test_the_owner_sees_the_flag_on_the_job_page_and_in_the_job_list(
    running: Any, clients: Any
) -> None:
    for minute in range(0, 45):
        _tick(minute)
    page = clients["alice"].get(f"/jobs/{running.pk}/").content.decode()
    words = page.split('id="job-gpu-activity"', 1)[1].split("</dd>", 1)[0]
    assert "Idle: its 8 GPUs have been below 5 % utilization for" in words
    listing = clients["alice"].get("/jobs/").content.decode()
    row = listing.split(f'data-job-id="{running.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "idle GPUs" in row


def test_a_busy_job_has_no_marker(running: Any, clients: Any) -> None:
    _tick(0)
    _tick(1)
    page = clients["alice"].get(f"/jobs/{running.pk}/").content.decode()
    assert "GPU utilization 85 %" in page and "Idle:" not in page
    assert "idle GPUs" not in clients["alice"].get("/jobs/").content.decode()


def test_the_utilization_page_shows_gpu_hours_held_idle_per_team(
    running: Any, clients: Any
) -> None:
    from django.utils import timezone

    from gpuqueue.core.usage_hours import hour_of

    UsageRecord.objects.create(
        job_id=running.pk,
        attempt=9,
        hour=hour_of(timezone.now()),
        team=running.team,
        user=running.user,
        flavor=running.flavor,
        gpus=8,
        gpu_seconds=8 * 1800.0,
        used_gpu_seconds=8 * 1800 * 0.3,
        idle_gpu_seconds=4 * 3600.0,
    )
    page = clients["carol"].get("/utilization/").content.decode()
    table = page.split('id="idle-gpus"', 1)[1].split("</table>", 1)[0]
    assert "team-a" in table
    # held 4.00 GPU-hours, used 1.20 (30 %), held idle 4.00
    assert '<td class="num">4.00</td><td class="num">1.20</td><td class="num">4.00</td>' in table


def test_the_snapshot_marks_idle_jobs_for_reclaim_only_under_a_reclaim_first_flavor(
    running: Any, world: Any
) -> None:
    from django.utils import timezone

    from gpuqueue.cycle.snapshot import load_snapshot

    for minute in range(0, 45):
        _tick(minute)

    def flagged() -> bool:
        (job,) = [j for j in load_snapshot(timezone.now()).running if j.id == running.pk]
        return job.idle_reclaim_first

    assert not flagged()  # the default policy only flags
    world.h100.idle_policy = "reclaim_first"
    world.h100.save()
    assert flagged()
    JobActivity.objects.filter(job_id=running.pk).update(idle=False)
    assert not flagged()
