"""A plan kept while only the clock moves: `plan_holds_later` says yes only when planning again
at the later time gives the same plan, every reason included (Hypothesis), and says no as soon as
a rule that reads the clock would answer differently (one case per rule)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.engine import plan_holds_later
from gpuqueue.scheduler.model import Policy, Snapshot
from tests.scheduler.builders import HOUR, NOW, nodes, pending, running, team
from tests.scheduler.test_properties import SETTINGS, policies, snapshots

# Steps that cross each threshold of the generated snapshots (starvation 600 s or 1 h, minimum
# runtime 0 or 300 s, reclaim hysteresis 30 min) and steps that cross none.
LATER = [0.0, 1.0, 30.0, 60.0, 240.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0]


@SETTINGS
@given(snapshots(), policies(), st.sampled_from(LATER))
def test_a_plan_said_to_hold_later_is_the_plan_made_later(
    snapshot: Snapshot, policy: Policy, step: float
) -> None:
    result = plan(snapshot, policy)
    later = NOW + step
    holds = plan_holds_later(snapshot, result, later, policy)
    event(f"holds: {holds}")
    if holds:
        assert plan(replace(snapshot, now=later), policy) == result


@dataclass(frozen=True)
class Case:
    name: str
    snapshot: Snapshot
    later: float
    holds: bool
    differs: bool = False  # the later plan is not the same (the rule did change an answer)
    policy: Policy = Policy()


def _snapshot(**parts: object) -> Snapshot:
    fields: dict[str, object] = {
        "now": NOW,
        "nodes": nodes(1, h100=8),
        "teams": (team("a", guarantee=4), team("b", guarantee=4)),
        "running": (),
        "pending": (),
    }
    fields.update(parts)
    return Snapshot(**fields)  # type: ignore[arg-type]


# Team a holds the node with two jobs (a borrows 4 GPUs beyond its guarantee); team b waits.
BUSY = {
    "running": (
        running(10, "a", {"n1": 1}, gpus=4, started=NOW - 2 * HOUR),
        running(11, "a", {"n1": 1}, gpus=4, started=NOW - 2 * HOUR),
    ),
}

CASES = [
    Case(
        "a plan with nothing to do holds while no threshold is near",
        _snapshot(**BUSY, pending=(pending(1, "a", gpus=8, submitted=NOW - 60),)),
        NOW + 600,
        holds=True,
    ),
    Case(
        "a plan does not hold past the moment a waiting job starts to starve",
        _snapshot(
            running=(
                running(10, "a", {"n1": 1}, gpus=4, preemptible=False, started=NOW - 2 * HOUR),
                running(11, "a", {"n1": 1}, gpus=4, preemptible=False, started=NOW - 2 * HOUR),
            ),
            pending=(pending(1, "b", gpus=4, submitted=NOW - 60),),
        ),
        NOW + HOUR,
        holds=False,
        differs=True,
    ),
    Case(
        "a plan does not hold past the end of a running job's minimum runtime",
        _snapshot(
            running=(
                running(10, "a", {"n1": 1}, gpus=4, started=NOW - 60),
                running(11, "a", {"n1": 1}, gpus=4, started=NOW - 60),
            ),
            pending=(pending(1, "b", gpus=4, submitted=NOW - 60),),
        ),
        NOW + 300,
        holds=False,
        differs=True,
    ),
    Case(
        "a plan does not hold once a borrowed job has run long enough to be reclaimed",
        _snapshot(
            teams=(team("a"), team("b")),
            running=(
                running(10, "b", {"n1": 1}, gpus=4, started=NOW - 1000),
                running(11, "b", {"n1": 1}, gpus=4, started=NOW - 1000),
            ),
            pending=(pending(1, "a", gpus=4, submitted=NOW - 60),),
        ),
        NOW + 900,
        holds=False,
        differs=True,
    ),
    Case(
        "a plan with a reservation never holds: its expected start moves with the clock",
        _snapshot(
            running=(
                running(10, "a", {"n1": 1}, gpus=8, started=NOW - HOUR, max_runtime=2 * HOUR),
            ),
            pending=(pending(1, "b", gpus=8, submitted=NOW - 2 * HOUR),),
        ),
        NOW + 60,
        holds=False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_plan_holds_later(case: Case) -> None:
    result = plan(case.snapshot, case.policy)
    assert plan_holds_later(case.snapshot, result, case.later, case.policy) == case.holds
    later = plan(replace(case.snapshot, now=case.later), case.policy)
    if case.holds:
        assert later == result
    if case.differs:
        assert later != result


def test_a_plan_that_explains_a_share_debt_is_not_kept() -> None:
    """The reason of a job held back by its team's share debt says when the debt should be
    back under the threshold: a time that moves with the clock (found by Hypothesis)."""
    debt = Policy().share_borrow_debt_seconds * 2 + 1
    snapshot = _snapshot(
        teams=(team("a", guarantee=2), team("b", guarantee=6)),
        running=(running(10, "a", {"n1": 2}), running(11, "b", {"n1": 1}, gpus=4)),
        pending=(pending(1, "a"), pending(2, "b", gpus=4)),
        share_balance={("a", "h100"): -debt},
    )
    result = plan(snapshot)
    why = {p.job_id: p.reason.code for p in result.pending}
    assert why[1] == "in_share_debt"
    assert not plan_holds_later(snapshot, result, NOW + 60, Policy())
    assert plan(replace(snapshot, now=NOW + 60)) != result
    # Without explanations the same plan holds: no reason is given, and the decisions are.
    quiet = plan(snapshot, explain=False)
    assert plan_holds_later(snapshot, quiet, NOW + 60, Policy())
    assert plan(replace(snapshot, now=NOW + 60), explain=False) == quiet
