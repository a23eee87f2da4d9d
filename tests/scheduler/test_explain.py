"""A plan that explains nothing (`plan(explain=False)`, each step of a forecast) decides as the
full plan does: the same admissions, preemptions and reservations, only no reasons or
positions, and it stops considering jobs once none of the rest could change that."""

from __future__ import annotations

import importlib
from unittest.mock import patch

import pytest
from hypothesis import given

from gpuqueue.scheduler import engine
from gpuqueue.scheduler.bench import large
from gpuqueue.scheduler.engine import plan
from gpuqueue.scheduler.model import Plan, Policy, Snapshot
from tests.scheduler.test_properties import SETTINGS, policies, snapshots

# The module (the package exports its function under the same name).
forecast = importlib.import_module("gpuqueue.scheduler.forecast")


def decisions(result: Plan) -> tuple[object, ...]:
    return (result.admissions, result.preemptions, result.reservations, result.fair_shares)


@SETTINGS
@given(snapshots(), policies())
def test_a_plan_that_explains_nothing_decides_as_the_full_plan(
    snapshot: Snapshot, policy: Policy
) -> None:
    terse = plan(snapshot, policy, explain=False)
    assert decisions(terse) == decisions(plan(snapshot, policy))
    assert terse.pending == ()


def full_plan(snapshot: Snapshot, policy: Policy, *, explain: bool = True) -> Plan:
    del explain  # every job considered, every reason made
    return plan(snapshot, policy)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_forecast_gives_the_same_starts_as_with_full_plans(seed: int) -> None:
    """A busy cluster with a long queue (the engine benchmark's shape, small), some jobs with
    a max runtime that may backfill reservations: the steps stop early, and every start is
    the one full plans give."""
    snapshot = large(60, 6, 200, 600, seed)
    policy = Policy()
    stopped: list[bool] = []
    real = engine.Settled.after

    def spy(self: engine.Settled, job: object) -> bool:
        answer = real(self, job)  # type: ignore[arg-type]
        stopped.append(answer)
        return answer

    with patch.object(engine.Settled, "after", spy):
        terse = forecast.forecast(snapshot, policy)
    with patch.object(forecast, "plan", full_plan):
        full = forecast.forecast(snapshot, policy)
    assert terse == full
    assert any(stopped), "no step stopped early: the comparison would prove nothing"
    assert sum(start is not None for start in terse.values()) > len(terse) / 2
