"""The memos of a plan change nothing (Hypothesis).

A plan keeps some answers while what they were computed from holds: the verdict for a kind of
job (engine.Cycle._consider), the workers that fit per flavor (FlavorLedger.fits), the backfill
room and the reason of a job behind reservations (starvation.Reserver). `Cycle(..., memo=False)`
plans with every one of them off; it must give the plan of `plan()`, every reason and position
included, on small generated snapshots and on busy ones where the memos are hit thousands of
times (many jobs of few kinds, reservations, a small search budget, share debts).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event, given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.bench import FLAVORS, large, limited, reclaim
from gpuqueue.scheduler.engine import Cycle
from gpuqueue.scheduler.model import Policy, Snapshot
from tests.scheduler.builders import HOUR
from tests.scheduler.test_properties import SETTINGS, policies, promises, snapshots


def _plain(snapshot: Snapshot, policy: Policy) -> None:
    kept = Cycle(snapshot, policy)
    result = kept.run()
    event(f"verdicts kept: {'some' if kept._verdicts else 'none'}")
    assert Cycle(snapshot, policy, memo=False).run() == result
    assert plan(snapshot, policy) == result


@st.composite
def budgets(draw: st.DrawFn) -> Policy:
    """The generated policies with small budgets too: the search budget and the count of
    reservations are part of the state a kept verdict depends on."""
    policy = draw(policies())
    return replace(
        policy,
        max_victim_searches_per_cycle=draw(st.sampled_from([0, 1, 2, 64])),
        max_preemptions_per_cycle=draw(st.sampled_from([1, 2, 64])),
        max_reservations=draw(st.sampled_from([0, 1, 8])),
        time_based_share=draw(st.booleans()),
    )


@SETTINGS
@given(snapshots(), budgets())
def test_a_plan_is_the_same_with_every_memo_off(snapshot: Snapshot, policy: Policy) -> None:
    _plain(snapshot, policy)


@SETTINGS
@given(promises(), budgets())
def test_a_plan_with_gpus_promised_is_the_same_with_every_memo_off(
    snapshot: Snapshot, policy: Policy
) -> None:
    _plain(snapshot, policy)


@st.composite
def busy(draw: st.DrawFn) -> Snapshot:
    """The benchmark's clusters (engine bench), small: three flavors, thousands of jobs of a
    few kinds, some starving, on nodes that report their CPU, memory and pods or not; or one
    team holding everything while others reclaim. With or without share balances (every team
    in debt, owed or even)."""
    seed = draw(st.integers(0, 2**16))
    if draw(st.booleans()):
        snapshot = draw(st.sampled_from([large, limited]))(
            nodes=draw(st.integers(5, 80)),
            teams=draw(st.integers(1, 6)),
            running=draw(st.integers(0, 600)),
            pending=draw(st.integers(1, 1500)),
            seed=seed,
        )
    else:
        snapshot = reclaim(draw(st.integers(2, 40)), draw(st.integers(1, 6)), 0, 200, seed)
    if draw(st.booleans()):
        balance = {
            (t.id, flavor): draw(st.sampled_from([-16 * HOUR, -HOUR, 0.0, 2 * HOUR]))
            for t in snapshot.teams
            for flavor, _ in FLAVORS
        }
        snapshot = replace(snapshot, share_balance=balance)
    return snapshot


@settings(max_examples=40, deadline=None)
@given(busy(), budgets())
def test_a_busy_plan_is_the_same_with_every_memo_off(snapshot: Snapshot, policy: Policy) -> None:
    _plain(snapshot, policy)
