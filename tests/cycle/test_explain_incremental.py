"""The explain phase compares the engine's reasons with the ones the kept read says the rows
show (cycle/job_feed.py, `Active.reasons`) and turns only new or changed ones into data: what
it leaves on the rows must be what a full explain (caches off, every reason made anew) leaves.
tests/cycle/test_snapshot_sequences.py checks the same after any sequence of changes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.test.utils import override_settings
from django.utils import timezone

from gpuqueue.cycle import run
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.models import Job
from tests.standings import ROW, put_back, show


def _rows() -> list[tuple[Any, ...]]:
    return list(Job.objects.order_by("id").values_list(*ROW))


def _full_explain(now: Any, backend: Any) -> list[tuple[Any, ...]]:
    """The rows a cycle with caches off leaves at `now`, the rows put back as they were."""
    before = _rows()
    with override_settings(GPUQUEUE_CACHES=False):
        run.run_cycle(now, backend)
    after = _rows()
    put_back(before)
    return after


@pytest.mark.django_db(transaction=True)
def test_a_new_plan_turns_only_new_or_changed_reasons_into_data(
    world: Any, backend: Any, submit: Any
) -> None:
    sync_cluster(backend)
    now = timezone.now()
    submit(workers=4, gpus_per_worker=8)  # all 32 H100s
    waiting = [submit(world.carol, team=world.team_b, gpus_per_worker=8) for _ in range(5)]
    run.run_cycle(now, backend)
    run.run_cycle(now, backend)  # the hog's admission changed the snapshot
    shown = {row[0]: row[2] for row in _rows()}

    later = now + timedelta(seconds=1)
    newcomer = submit(world.carol, team=world.team_b, gpus_per_worker=8)  # the queue changed
    expected = _full_explain(later, backend)
    with mock.patch.object(run, "reason_as_data", wraps=run.reason_as_data) as made:
        result = run.run_cycle(later, backend)

    assert not result.kept_plan and not result.admitted
    assert _rows() == expected  # what a full explain writes
    assert made.call_count == 1  # the newcomer's reason alone was made
    assert {row[0]: row[2] for row in _rows() if row[0] in {j.pk for j in waiting}} == {
        j.pk: shown[j.pk] for j in waiting
    }
    assert Job.objects.get(pk=newcomer.pk).pending_reason is not None


@pytest.mark.django_db(transaction=True)
def test_a_reason_written_behind_the_cycle_is_made_anew(
    world: Any, backend: Any, submit: Any
) -> None:
    """A row whose watched columns change drops its kept reason with its kept values: the
    next explain compares the plan's reason with the row again, not with what it last wrote."""
    sync_cluster(backend)
    now = timezone.now()
    submit(workers=4, gpus_per_worker=8)
    waiting = [submit(world.carol, team=world.team_b, gpus_per_worker=8) for _ in range(3)]
    run.run_cycle(now, backend)
    run.run_cycle(now, backend)
    # The row changes (a watched column) and its reason is overwritten beside it.
    Job.objects.filter(pk=waiting[1].pk).update(priority=1)
    show(waiting[1].pk, reason={"code": "stale"})

    later = now + timedelta(seconds=1)
    expected = _full_explain(later, backend)
    run.run_cycle(later, backend)
    assert _rows() == expected
    assert Job.objects.get(pk=waiting[1].pk).pending_reason["code"] != "stale"
