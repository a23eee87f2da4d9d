"""The positions a user reads after a cycle (the API's job body, the ordering by place in the
cluster's queue) are those the plan gave, written while the launch runs beside the explain
(cycle/beside.py); a job that left the queue shows none."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from gpuqueue import scheduler
from gpuqueue.api.serializers import JobSerializer
from gpuqueue.core.job_order import Ordering
from gpuqueue.core.states import JobState
from gpuqueue.cycle import run
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.models import Job
from gpuqueue.scheduler import model as m
from gpuqueue.services.jobs.cancel import cancel_job

pytestmark = pytest.mark.django_db(transaction=True)  # the explain on a connection of its own


def _cycle(backend: Any, monkeypatch: Any) -> tuple[run.CycleResult, m.Plan]:
    plans: list[m.Plan] = []
    real = scheduler.plan

    def plan(*args: Any, **kwargs: Any) -> m.Plan:
        plans.append(real(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(run.scheduler, "plan", plan)
    result = run.run_cycle(timezone.now(), backend)
    monkeypatch.undo()
    return result, plans[-1]


def _positions(job_id: int) -> tuple[Any, Any]:
    body = JobSerializer(Job.objects.select_related("team", "flavor", "user").get(pk=job_id)).data
    return body["queue_position"], body["cluster_position"]


@pytest.fixture
def wave(world: Any, backend: Any, submit: Any) -> list[Job]:
    """Two teams asking for more than the 32 H100s: some admitted, the rest pending."""
    sync_cluster(backend)
    jobs = []
    for i in range(6):
        jobs.append(submit(workers=1, gpus_per_worker=8))
        jobs.append(submit(world.carol, team=world.team_b, workers=1, gpus_per_worker=4 + i % 2))
    return jobs


def test_the_positions_read_after_a_cycle_are_those_the_plan_gave(
    wave: list[Job], backend: Any, monkeypatch: Any
) -> None:
    result, plan = _cycle(backend, monkeypatch)

    assert result.admitted and len(plan.pending) >= 4  # launched, and explained beside it
    for decision in plan.pending:
        assert _positions(decision.job_id) == (decision.team_position, decision.cluster_position)
    pending = Job.objects.filter(state=JobState.PENDING)
    in_order = list(Ordering.parse("position").apply(pending, timezone.now()).values_list("id"))
    assert [job_id for (job_id,) in in_order] == [d.job_id for d in plan.pending]


def test_a_job_that_left_the_queue_shows_no_position(
    world: Any, wave: list[Job], backend: Any, monkeypatch: Any
) -> None:
    result, plan = _cycle(backend, monkeypatch)
    admitted = result.admitted[0]
    cancelled = Job.objects.get(pk=plan.pending[0].job_id)

    cancel_job(world.root, cancelled)

    assert _positions(admitted) == (None, None)
    assert _positions(cancelled.pk) == (None, None)
    assert _positions(plan.pending[1].job_id) == (
        plan.pending[1].team_position,
        plan.pending[1].cluster_position,
    )
