"""Time-based fair share in the live cycle: balances kept in PostgreSQL, advanced every cycle."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test.utils import override_settings
from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.cycle import run as cycle
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, Node, Quota, ShareBalance
from gpuqueue.scheduler.model import Policy
from gpuqueue.services.quotas.share_balance import max_credit_seconds

RATE = math.log(2) / Policy().share_half_life_seconds  # 1 / the balance's time constant
HOUR = 3600.0


def hold(job: Job, now: datetime, first: int = 0, hours: float = 1) -> None:
    """The job runs, one worker on each H100 node from the `first` (placement: node -> workers),
    admitted `hours` ago."""
    nodes = Node.objects.order_by("name").filter(name__startswith="h100-")
    placement = {node.name: 1 for node in nodes[first : first + job.workers]}
    Job.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, admitted_at=now - timedelta(hours=hours), placement=placement
    )


def balances() -> dict[tuple[str, str], tuple[float, datetime]]:
    return {
        (row.team.slug, row.flavor.name): (row.balance, row.updated_at)
        for row in ShareBalance.objects.select_related("team", "flavor")
    }


def after(balance: float, gap: float, seconds: float, credited: float | None = None) -> float:
    """`balance` advanced by `seconds` with `gap` GPUs of (entitled - held), `credited` of them
    credited (usage.py's arithmetic, written out)."""
    credited = seconds if credited is None else credited
    return balance * math.exp(-RATE * seconds) + gap * (1 - math.exp(-RATE * credited)) / RATE


@pytest.fixture
def contended(world: Any, submit: Any, backend: Any) -> datetime:
    """team-a holds every H100 (32: 8 guaranteed, 24 borrowed) while team-b asks for 8: team-a
    is entitled to 24 and team-b to 8. Preemption and reclaim are off, so that nothing moves."""
    sync_cluster(backend)
    now = timezone.now()
    hold(submit(workers=4, gpus_per_worker=8), now)
    submit(user=world.carol, team=world.team_b, workers=1, gpus_per_worker=8)
    return now


@override_settings(GPUQUEUE_PREEMPTION=False, GPUQUEUE_RECLAIM=False)
def test_balances_accumulate_across_cycles_and_persist(contended: datetime, backend: Any) -> None:
    t0 = contended
    run_cycle(now=t0, backend=backend)
    first = balances()
    # Every team and flavor with a quota has a row from the first cycle on, at 0.
    assert first == {
        (team, flavor): (0.0, t0) for team in ("team-a", "team-b") for flavor in ("h100", "l4")
    }

    run_cycle(now=t0 + timedelta(seconds=30), backend=backend)
    run_cycle(now=t0 + timedelta(seconds=60), backend=backend)

    now = balances()
    # team-a held 8 GPUs more than its 24 for 60 s, team-b 8 fewer than its 8.
    expected = after(after(0.0, -8, 30), -8, 30)
    assert now[("team-a", "h100")][0] == pytest.approx(expected, rel=1e-9)
    assert now[("team-b", "h100")][0] == pytest.approx(-expected, rel=1e-9)
    assert expected == pytest.approx(-480, rel=1e-3)
    assert now[("team-a", "l4")][0] == 0.0
    assert {updated for _, updated in now.values()} == {t0 + timedelta(seconds=60)}


@override_settings(GPUQUEUE_PREEMPTION=False, GPUQUEUE_RECLAIM=False)
def test_after_a_gap_only_the_last_credit_interval_counts_and_the_whole_gap_decays(
    contended: datetime, backend: Any
) -> None:
    t0 = contended
    run_cycle(now=t0, backend=backend)
    run_cycle(now=t0 + timedelta(seconds=60), backend=backend)
    before = balances()[("team-a", "h100")][0]

    run_cycle(now=t0 + timedelta(seconds=60 + 2 * HOUR), backend=backend)  # the worker was down

    cap = max_credit_seconds()
    assert cap == 60.0  # 10 cycles of GPUQUEUE_CYCLE_SECONDS (3 s), at least a minute
    expected = after(before, -8, 2 * HOUR, credited=cap)
    assert balances()[("team-a", "h100")][0] == pytest.approx(expected, rel=1e-9)
    # Not the 2 h x 8 GPUs of debt that pretending the state held all along would charge.
    assert expected > -2 * 60 * 8


@override_settings(GPUQUEUE_PREEMPTION=False, GPUQUEUE_RECLAIM=False)
def test_a_cycle_that_fails_leaves_the_balances_as_they_were(
    contended: datetime, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    t0 = contended
    run_cycle(now=t0, backend=backend)
    run_cycle(now=t0 + timedelta(seconds=30), backend=backend)
    stored = balances()

    def store_then_fail(*args: Any) -> None:
        real_store(*args)  # the upsert ran...
        raise RuntimeError("the database went away")  # ...and the transaction rolls back

    real_store = cycle.store_balances
    monkeypatch.setattr(cycle, "store_balances", store_then_fail)
    with pytest.raises(RuntimeError):
        run_cycle(now=t0 + timedelta(seconds=60), backend=backend)
    assert balances() == stored

    monkeypatch.setattr(cycle, "store_balances", real_store)
    run_cycle(now=t0 + timedelta(seconds=60), backend=backend)  # the next cycle catches up
    expected = after(after(0.0, -8, 30), -8, 30)
    assert balances()[("team-a", "h100")][0] == pytest.approx(expected, rel=1e-9)


@override_settings(GPUQUEUE_TIME_BASED_SHARE=False)
def test_with_the_setting_off_the_cycle_keeps_no_balances(
    contended: datetime, backend: Any
) -> None:
    run_cycle(now=contended, backend=backend)
    run_cycle(now=contended + timedelta(seconds=30), backend=backend)
    assert not ShareBalance.objects.exists()


def in_debt_world(world: Any, submit: Any, backend: Any, debt_hours: float) -> tuple[Job, Any]:
    """team-a has no weight on H100 (its fair share is its guarantee, 8), holds 8 and asks
    for 8 more: 24 GPUs are free, on empty nodes only, so it may borrow unless it is in debt (a
    team in debt borrows only on nodes already in use). Its balance is stored
    at -debt_hours GPU-hours, as an earlier cycle left it."""
    sync_cluster(backend)
    Quota.objects.filter(team=world.team_a, flavor=world.h100).update(weight=0)
    now = timezone.now()
    hold(submit(workers=1, gpus_per_worker=8), now)
    job = submit(workers=1, gpus_per_worker=8)
    ShareBalance.objects.create(
        team=world.team_a,
        flavor=world.h100,
        balance=-debt_hours * HOUR,
        updated_at=now - timedelta(seconds=3),
    )
    return job, now


def test_a_team_in_debt_borrows_no_gpus_of_an_empty_node(
    world: Any, submit: Any, backend: Any
) -> None:
    # 100 GPU-hours of debt, over 8 h x max(fair share 8, the job's 8 GPUs) = 64 GPU-hours.
    job, now = in_debt_world(world, submit, backend, debt_hours=100)
    result = run_cycle(now=now, backend=backend)
    job.refresh_from_db()
    assert result.admitted == [] and job.state == JobState.PENDING
    assert job.pending_reason["code"] == "in_share_debt"
    numbers = job.pending_reason["numbers"]
    assert numbers["fair_share"] == 8 and numbers["in_use"] == 8 and numbers["requested"] == 8
    assert numbers["threshold_seconds"] == 8 * 8 * HOUR
    assert numbers["debt_seconds"] == pytest.approx(100 * HOUR, rel=1e-3)
    # The debt halves every day: 100 -> 64 GPU-hours in log2(100 / 64) days.
    expected = now.timestamp() + 86400 * math.log2(numbers["debt_seconds"] / (64 * HOUR))
    assert numbers["recovers_at"] == pytest.approx(expected)


def test_a_team_in_debt_gets_an_estimated_start_when_its_debt_has_decayed(
    world: Any, submit: Any, backend: Any
) -> None:
    """The forecast reads the balances the cycle stored and plays them forward: the job starts
    in it when the debt falls under the threshold, the time its reason gives. (Before, the
    forecast held the debt as it was, and the job had no estimate.)"""
    from gpuqueue.cycle.run import refresh_forecasts

    job, now = in_debt_world(world, submit, backend, debt_hours=100)
    run_cycle(now=now, backend=backend)
    assert refresh_forecasts(now=now) == 1
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.estimated_start is not None
    recovers_at = job.pending_reason["numbers"]["recovers_at"]
    assert job.estimated_start.timestamp() == pytest.approx(recovers_at, abs=60)
    assert recovers_at - now.timestamp() > 15 * HOUR  # log2(100 / 64) days


def test_a_team_whose_debt_is_under_the_threshold_borrows_free_gpus(
    world: Any, submit: Any, backend: Any
) -> None:
    job, now = in_debt_world(world, submit, backend, debt_hours=60)
    result = run_cycle(now=now, backend=backend)
    assert result.admitted == [job.pk]


@override_settings(GPUQUEUE_TIME_BASED_SHARE=False)
def test_with_the_setting_off_debt_does_not_hold_a_team_back(
    world: Any, submit: Any, backend: Any
) -> None:
    job, now = in_debt_world(world, submit, backend, debt_hours=100)
    assert run_cycle(now=now, backend=backend).admitted == [job.pk]


def no_share_world(world: Any, submit: Any, backend: Any, b_limit: int = 32) -> datetime:
    """team-a has no share of H100 (no guarantee, no weight): what team-b may hold (its limit)
    is team-b's to claim."""
    sync_cluster(backend)
    Quota.objects.filter(team=world.team_a, flavor=world.h100).update(guarantee=0, weight=0)
    Quota.objects.filter(team=world.team_b, flavor=world.h100).update(limit=b_limit)
    return timezone.now()


def test_a_team_with_no_share_gets_its_turn_at_once(world: Any, submit: Any, backend: Any) -> None:
    # team-b holds all 32 GPUs, 8 more than its limit now allows (an admin lowered it): 8
    # GPUs that are nobody's fair share.
    now = no_share_world(world, submit, backend, b_limit=24)
    held = [submit(user=world.carol, team=world.team_b, gpus_per_worker=8) for _ in range(4)]
    for node, job in enumerate(held):
        # team-b holds all 32 GPUs, for 5 hours now: past the reclaim hysteresis (4 h).
        hold(job, now, first=node, hours=5)
    job = submit(gpus_per_worker=8)

    result = run_cycle(now=now, backend=backend)

    # Not in debt and holding nothing: its oldest job goes first and reclaims a node's worth.
    assert len(result.preempted) == 1 and result.preempted[0] in {j.pk for j in held}
    job.refresh_from_db()
    assert job.pending_reason["code"] == "waiting_for_preemption"


@override_settings(GPUQUEUE_TIME_BASED_SHARE=False)
def test_without_balances_a_team_with_no_share_waits_its_hour(
    world: Any, submit: Any, backend: Any
) -> None:
    now = no_share_world(world, submit, backend, b_limit=24)
    for node in range(4):
        job = submit(user=world.carol, team=world.team_b, gpus_per_worker=8)
        hold(job, now, first=node, hours=5)
    submit(gpus_per_worker=8)
    assert run_cycle(now=now, backend=backend).preempted == []


@pytest.mark.parametrize(("debt_hours", "yields"), [(7.9, False), (8.1, True)])
def test_a_team_with_no_share_yields_its_last_job_once_it_owes_an_hour_of_it(
    world: Any, submit: Any, backend: Any, debt_hours: float, yields: bool
) -> None:
    """team-a's 8-GPU job has run 5 hours (past the reclaim hysteresis); team-b asks for its
    share back. The job is kept until team-a owes an hour of its 8 GPUs
    (Policy.share_slice_seconds)."""
    now = no_share_world(world, submit, backend)
    last = submit(gpus_per_worker=8)
    hold(last, now, hours=5)
    for node in range(1, 4):
        hold(submit(user=world.carol, team=world.team_b, gpus_per_worker=8), now, first=node)
    submit(user=world.carol, team=world.team_b, gpus_per_worker=8)
    ShareBalance.objects.create(
        team=world.team_a,
        flavor=world.h100,
        balance=-debt_hours * HOUR,
        updated_at=now - timedelta(seconds=3),
    )
    result = run_cycle(now=now, backend=backend)
    assert result.preempted == ([last.pk] if yields else [])
