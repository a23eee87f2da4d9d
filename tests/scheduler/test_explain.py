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
from gpuqueue.scheduler.model import PendingJob, Plan, Policy, Snapshot
from tests.scheduler.test_properties import SETTINGS, policies, promises, snapshots

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


@SETTINGS
@given(promises(), policies())
def test_a_plan_that_explains_nothing_hands_promised_gpus_on_as_the_full_plan(
    snapshot: Snapshot, policy: Policy
) -> None:
    # A preemptor is decided even where jobs of its kind were already: what was promised to
    # it comes back to the jobs after it at that point of the order, in both plans.
    assert decisions(plan(snapshot, policy, explain=False)) == decisions(plan(snapshot, policy))


def full_plan(snapshot: Snapshot, policy: Policy, *, explain: bool = True) -> Plan:
    del explain  # every job considered, every reason made
    return plan(snapshot, policy)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_forecast_gives_the_same_starts_as_with_full_plans(seed: int) -> None:
    """A busy cluster with a long queue (the engine benchmark's shape, small), some jobs with
    a max runtime that may backfill reservations: the steps skip jobs whose verdict is known
    and stop early, and every start is the one full plans give."""
    snapshot = large(60, 6, 200, 600, seed)
    policy = Policy()
    stopped: list[bool] = []
    skipped: list[int] = []
    real = engine.Settled.stops

    def spy(self: engine.Settled, run: list[PendingJob]) -> bool:
        before = len(run)
        answer = real(self, run)
        stopped.append(answer and bool(run))  # not only the run used up
        skipped.append(before - len(run))
        return answer

    with patch.object(engine.Settled, "stops", spy):
        terse = forecast.forecast(snapshot, policy)
    with patch.object(forecast, "plan", full_plan):
        full = forecast.forecast(snapshot, policy)
    assert terse == full
    assert any(stopped), "no step stopped early: the comparison would prove nothing"
    assert any(skipped), "no job was skipped: the comparison would prove nothing"
    assert sum(start is not None for start in terse.values()) > len(terse) / 2


def test_a_run_is_skipped_only_over_verdicts_reached_in_the_cycles_state() -> None:
    """A job is skipped when its kind's verdict was reached in the state the cycle is in; a
    verdict from before the ledger moved (a preemption, say) no longer holds."""
    snapshot = large(20, 3, 40, 100, 1)
    cycle = engine.Cycle(snapshot, Policy(), explain=False)
    settled = engine.Settled(cycle)
    kinds: dict[object, PendingJob] = {}
    for job in snapshot.pending:
        kinds.setdefault(job.kind, job)
    first, stale, known = list(kinds.values())[:3]
    ledger_stamp, searches, reservations = cycle._state()
    cycle._verdicts[known.kind] = ((ledger_stamp, searches, reservations), None, 0, 0)
    cycle._verdicts[stale.kind] = ((ledger_stamp - 1, searches, reservations), None, 0, 0)
    run = [first, stale, known]
    assert settled.stops(run) is False
    assert run == [first, stale]
