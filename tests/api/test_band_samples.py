"""The band's stretch in the service (gpuqueue/services/forecasts/band_samples.py): forecasts
kept in PostgreSQL once an hour, what became of their jobs read from the jobs' timelines, and the
band stored on a pending job stretched by what earlier bands missed by."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import pytest

from gpuqueue.core import caches
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import refresh_forecasts
from gpuqueue.models import ForecastSample, Job, JobEvent
from gpuqueue.scheduler.band_misses import chosen
from gpuqueue.services.forecasts.band_samples import band_samples
from tests.api.test_runtime_prediction import waiting_behind_the_h100s

HOUR = timedelta(hours=1)


def band_of(job: Job, now: datetime) -> tuple[float, float]:
    """The stored band's ends, as seconds from `now`."""
    job.refresh_from_db()
    early, late = (datetime.fromisoformat(job.forecast[end]) for end in ("early", "late"))
    return (early - now).total_seconds(), (late - now).total_seconds()


def left_queue(job: Job, at: datetime, to_state: str = JobState.ADMITTED) -> None:
    event = JobEvent.objects.create(job=job, from_state=JobState.PENDING, to_state=to_state)
    JobEvent.objects.filter(pk=event.pk).update(at=at)


def test_a_share_of_the_pending_jobs_bands_is_kept_once_an_hour_for_a_week(
    world: Any, submit: Any, backend: Any
) -> None:
    waiting, now = waiting_behind_the_h100s(submit, backend)
    # The first hour from now in which the waiting job is one of the sampled share.
    later = next(
        now + k * HOUR for k in range(200) if chosen(waiting.pk, (now + k * HOUR).timestamp())
    )
    stale = ForecastSample.objects.create(
        job=waiting, hour=0, sampled_at=later - 8 * 24 * HOUR, early_wait=1, late_wait=2
    )
    refresh_forecasts(now=later)
    early, late = band_of(waiting, later)
    kept = ForecastSample.objects.get()
    assert kept.job_id == waiting.pk and kept.sampled_at == later
    assert (kept.early_wait, kept.late_wait) == pytest.approx((early, late), abs=1e-3)
    assert not ForecastSample.objects.filter(pk=stale.pk).exists()
    refresh_forecasts(now=later + timedelta(minutes=1))  # the same hour: nothing more
    assert ForecastSample.objects.count() == 1


def test_what_became_of_each_sampled_job_is_read_from_its_timeline(world: Any, submit: Any) -> None:
    now = datetime.fromisoformat("2026-11-25T12:00:00+00:00")
    started, cancelled, waiting = submit(), submit(), submit()
    for job in (started, cancelled, waiting):
        ForecastSample.objects.create(
            job=job, hour=1, sampled_at=now - 3 * HOUR, early_wait=60, late_wait=None
        )
    left_queue(started, now - 4 * HOUR)  # before the sample: not what became of it
    left_queue(started, now - 2 * HOUR)
    left_queue(started, now + HOUR)  # after the time of learning: not known yet
    left_queue(cancelled, now - HOUR, JobState.CANCELLED)
    left_queue(waiting, now + HOUR)
    by_left = {(s.left, s.started) for s in band_samples(now.timestamp())}
    assert by_left == {
        ((now - 2 * HOUR).timestamp(), True),
        ((now - HOUR).timestamp(), False),
        (None, True),
    }
    assert all(s.late == math.inf and s.early == 60 for s in band_samples(now.timestamp()))


def test_the_stored_band_is_stretched_by_what_earlier_bands_missed_by(
    world: Any, submit: Any, backend: Any
) -> None:
    """Sixty earlier forecasts whose jobs all started at three times their band's late end:
    the next band is three times as wide each way; the most likely start does not move."""
    waiting, now = waiting_behind_the_h100s(submit, backend)
    refresh_forecasts(now=now)
    early, late = band_of(waiting, now)
    likely = (Job.objects.get(pk=waiting.pk).estimated_start - now).total_seconds()
    assert 0 < early < likely < late
    earlier = submit()
    admitted = now - HOUR
    left_queue(earlier, admitted)
    ForecastSample.objects.bulk_create(
        ForecastSample(
            job=earlier,
            hour=-i,
            sampled_at=admitted - i * HOUR,
            early_wait=i * 3600 / 6,
            late_wait=i * 3600 / 3,
        )
        for i in range(1, 61)
    )
    caches.forget_everything()  # the stretch is kept 10 minutes per process
    refresh_forecasts(now=now)
    assert band_of(waiting, now) == pytest.approx((early / 3, late * 3), rel=1e-3)
    assert (Job.objects.get(pk=waiting.pk).estimated_start - now).total_seconds() == likely
