"""Estimated starts, from running the engine forward in virtual time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuqueue.scheduler import forecast, plan
from gpuqueue.scheduler.fairshare import capacity_by_flavor
from gpuqueue.scheduler.model import Policy, ReasonCode, Snapshot
from gpuqueue.scheduler.usage import ShareBalance, held_and_asked
from tests.scheduler.builders import HOUR, NOW, Case, check, node, nodes, pending, running, team
from tests.scheduler.test_preemption import morning_grab

CASES = [
    Case(
        "a job past its expected end gives its GPUs back at the next step, not never",
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(
            running(10, "a", {"n1": 1}, gpus=8, started=NOW - 2 * HOUR, expected_runtime=HOUR),
        ),
        pending=(pending(1, "b", gpus=8),),
        forecasts={1: NOW + 60},
    ),
    Case(
        "a job that fits now starts now",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=8),),
        forecasts={1: NOW},
    ),
    Case(
        "a job starts when the running job in its way ends",
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(
            running(
                10, "a", {"n1": 1}, gpus=8, preemptible=False, started=NOW - 100, max_runtime=600
            ),
        ),
        pending=(pending(1, "b", gpus=8),),
        forecasts={1: NOW + 500},
    ),
    Case(
        "an expected runtime is a better guess than the max runtime",
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(
            running(
                10,
                "a",
                {"n1": 1},
                gpus=8,
                preemptible=False,
                started=NOW - 100,
                max_runtime=600,
                expected_runtime=200,
            ),
        ),
        pending=(pending(1, "b", gpus=8),),
        forecasts={1: NOW + 100},
    ),
    Case(
        "queued jobs start one after another",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=8, max_runtime=50), pending(2, "a", gpus=8)),
        forecasts={1: NOW, 2: NOW + 50},
    ),
    Case(
        "a job behind a job with no known end has no forecast",
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(running(10, "a", {"n1": 1}, gpus=8, preemptible=False),),
        pending=(pending(1, "b", gpus=8),),
        forecasts={1: None},
    ),
    Case(
        "a reclaiming job starts once its victims' checkpoint grace is over",
        **morning_grab(Policy(preemption_grace_seconds=90), forecasts={1: NOW + 90}),  # type: ignore[arg-type]
    ),
    Case(
        "a whole-node job starts when the first node drains, not when the cluster does",
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=16), team("b")),
        running=(
            running(10, "a", {"n1": 1}, gpus=4, preemptible=False, max_runtime=3600 + 300),
            running(11, "a", {"n2": 1}, gpus=8, preemptible=False, max_runtime=3600 + 900),
        ),
        pending=(pending(1, "b", gpus=8),),
        forecasts={1: NOW + 300},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forecast(case: Case) -> None:
    check(case)


def two_teams_in_debt_beside_an_idle_node() -> Snapshot:
    """Team a holds n1 for 48 h within its guarantee and asks for 8 more; team b, with no
    guarantee, asks for 8. Both are in debt past the borrowing threshold, so n2 stays idle until
    one of the debts has decayed: b's first (100 GPU-hours against a threshold of 8 h x 8
    GPUs; a's 1,000 against 8 h x its share of 12)."""
    return Snapshot(
        NOW,
        nodes(2, h100=8),
        (team("a", guarantee=8), team("b")),
        (running(10, "a", {"n1": 1}, gpus=8, preemptible=False, expected_runtime=48 * HOUR),),
        (
            pending(1, "a", gpus=8, expected_runtime=HOUR),
            pending(2, "b", gpus=8, expected_runtime=HOUR),
        ),
        share_balance={("a", "h100"): -1000 * HOUR, ("b", "h100"): -100 * HOUR},
    )


def test_a_team_in_debt_starts_in_the_forecast_once_its_debt_has_decayed() -> None:
    """The forecast moves the balances as the cycle would: b's job starts when its debt falls
    under the threshold, hours before a's running job ends (where the balances held as they
    were, it waited the 47 h left of a's job). The same as planning every minute and
    advancing the balances between plans, as the live cycle and the replay do."""
    snapshot = two_teams_in_debt_beside_an_idle_node()
    policy = Policy()
    first = plan(snapshot, policy)
    assert {p.job_id: p.reason.code for p in first.pending} == {
        1: ReasonCode.IN_SHARE_DEBT,
        2: ReasonCode.IN_SHARE_DEBT,
    }
    forecast_start = forecast(snapshot, policy)[2]
    assert forecast_start is not None and NOW + HOUR < forecast_start < NOW + 12 * HOUR
    # The reason tells the same time: b holds nothing of its share of 4, which is credited.
    why = {p.job_id: p.reason for p in first.pending}[2]
    assert why.numbers["recovers_at"] == pytest.approx(forecast_start, abs=2.0)
    assert cycle_by_cycle_start(snapshot, policy, job_id=2, step=60.0) == pytest.approx(
        forecast_start, abs=60.0
    )


def cycle_by_cycle_start(snapshot: Snapshot, policy: Policy, job_id: int, step: float) -> float:
    """When the job is admitted if the engine plans every `step` seconds and the balances
    advance between plans (nothing ends in this case before the job starts)."""
    assert snapshot.share_balance is not None
    balances = ShareBalance(
        snapshot.teams,
        capacity_by_flavor(snapshot),
        policy.share_half_life_seconds,
        snapshot.share_balance,
        NOW,
    )
    now = NOW
    while now < NOW + 48 * HOUR:
        state = replace(snapshot, now=now, share_balance=balances.snapshot())
        if job_id in {a.job_id for a in plan(state, policy).admissions}:
            return now
        now += step
        balances.advance(now, *held_and_asked(state.running, state.pending))
    raise AssertionError("never admitted")


def test_ends_within_a_tenth_of_the_time_ahead_are_taken_in_one_step() -> None:
    """The forecast takes everything within max(60 s, precision x the time from now) of the
    next event in one step (the default precision 0.1: benchmarks.md, "What the estimates and
    predictions cost"), so a start may be late by that much and never early. Node n1 frees at
    10 h, n2 at 10 h 54 min: one step at the default, the job starting at 10 h 54; two at 0.05,
    starting at 10 h."""
    snapshot = Snapshot(
        NOW,
        nodes(2, h100=8),
        (team("a", guarantee=16), team("b")),
        tuple(
            running(i, "a", {n: 1}, gpus=8, preemptible=False, started=NOW, expected_runtime=h)
            for i, n, h in ((10, "n1", 10 * HOUR), (11, "n2", 10.9 * HOUR))
        ),
        (pending(1, "b", gpus=8),),
    )
    assert forecast(snapshot)[1] == pytest.approx(NOW + 10.9 * HOUR)
    assert forecast(snapshot, precision=0.05)[1] == pytest.approx(NOW + 10 * HOUR)
