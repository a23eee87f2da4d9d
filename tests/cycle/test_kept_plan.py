"""The last plan kept while only the clock moves (gpuqueue/cycle/kept_plan.py), against the
plain path: a cycle with GPUQUEUE_CACHES off plans every time, and must leave the same rows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test.utils import override_settings
from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.cycle import job_feed
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import refresh_forecasts, run_cycle
from gpuqueue.models import Job, Standing
from tests.standings import ROW, put_back, show


def _rows() -> list[tuple[Any, ...]]:
    return list(Job.objects.order_by("id").values_list(*ROW))


def _plain_cycle(now: Any, backend: Any) -> list[tuple[Any, ...]]:
    """What a cycle that plans leaves at `now`, the rows put back as they were after."""
    before = _rows()
    with override_settings(GPUQUEUE_CACHES=False):
        assert not run_cycle(now, backend).kept_plan
    after = _rows()
    put_back(before)
    return after


@pytest.mark.django_db(transaction=True)
def test_a_plan_is_kept_while_only_the_clock_moves_and_until_its_horizon(
    world: Any, backend: Any, submit: Any, settings: Any
) -> None:
    settings.GPUQUEUE_STARVATION_SECONDS = 3600
    settings.GPUQUEUE_RECLAIM = False  # team-b waits for the GPUs, then starves
    sync_cluster(backend)
    now = timezone.now()
    hog = submit(workers=4, gpus_per_worker=8)  # all 32 H100s
    waiting = [submit(world.carol, team=world.team_b, gpus_per_worker=8) for _ in range(3)]
    first = run_cycle(now, backend)
    assert first.admitted == [hog.pk] and not first.kept_plan
    second = run_cycle(now, backend)  # the hog's admission changed the snapshot
    assert not second.kept_plan and not second.admitted

    later = now + timedelta(minutes=5)
    shown = _rows()
    third = run_cycle(later, backend)
    assert third.kept_plan and not third.admitted and _rows() == shown
    assert _plain_cycle(later, backend) == shown  # the plan it kept is the plan

    # Past the hour the waiting jobs starve: the horizon is behind, the cycle plans again.
    starving = now + timedelta(hours=1, seconds=1)
    expected = _plain_cycle(starving, backend)
    fourth = run_cycle(starving, backend)
    assert not fourth.kept_plan and _rows() == expected
    codes = {r[0]: r[2]["code"] for r in _rows() if r[0] == waiting[0].pk}
    assert codes == {waiting[0].pk: "reserved"}  # it plans what the clock brought


@pytest.mark.django_db(transaction=True)
def test_any_change_to_a_job_plans_again(
    world: Any, backend: Any, submit: Any, monkeypatch: Any
) -> None:
    sync_cluster(backend)
    now = timezone.now()
    submit(workers=4, gpus_per_worker=8)
    waiting = submit(gpus_per_worker=8)
    run_cycle(now, backend)
    run_cycle(now, backend)
    assert run_cycle(now, backend).kept_plan
    Job.objects.filter(pk=waiting.pk).update(priority=3)  # the job's row changed
    assert not run_cycle(now, backend).kept_plan
    assert run_cycle(now, backend).kept_plan
    # A reason written behind the cycle's back (by hand), read first by a forecast: reasons
    # are the cycle's to write and on no row the change feed watches (a `Standing`), so
    # the plan is kept; the feed's next whole read finds it, and the cycle writes its own back.
    shown = Standing.objects.values_list("reason", flat=True).get(job_id=waiting.pk)
    show(waiting.pk, reason={"code": "by_hand"})
    refresh_forecasts(now)
    assert run_cycle(now, backend).kept_plan
    monkeypatch.setattr(job_feed, "FULL_READ_SECONDS", 0.0)  # the whole read is due
    assert not run_cycle(now, backend).kept_plan
    assert Standing.objects.values_list("reason", flat=True).get(job_id=waiting.pk) == shown
    monkeypatch.undo()
    submit(gpus_per_worker=8)  # a new job
    assert not run_cycle(now, backend).kept_plan
    with override_settings(GPUQUEUE_CACHES=False):
        assert not run_cycle(now, backend).kept_plan
    assert Job.objects.filter(state=JobState.PENDING).count() == 2
