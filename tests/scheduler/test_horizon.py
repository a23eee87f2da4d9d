"""A plan stays the plan of its snapshot until its `stable_until` (scheduler/horizon.py).

The admission cycle keeps the last plan instead of planning again while nothing but the clock
moved and the clock has not reached the plan's `stable_until` (cycle/run.py). That is right
only if every way the engine reads the clock is accounted for: here, on generated snapshots
(small ones with starving jobs, minimum runtimes, reservations, share debts; and busy ones),
the same snapshot at any time before `stable_until` gives the same plan, every reason and
position included.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event, given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.horizon import still_holds
from gpuqueue.scheduler.model import Policy, Snapshot
from tests.scheduler.builders import HOUR, NOW, node, pending, running, team
from tests.scheduler.test_memo import budgets, busy
from tests.scheduler.test_properties import SETTINGS, snapshots

LATER = st.sampled_from([0.0, 0.001, 0.3, 0.7, 0.999, 1.0])  # where between now and the horizon


def _same_until_the_horizon(snapshot: Snapshot, policy: Policy, where: float) -> None:
    planned = plan(snapshot, policy)
    now, until = snapshot.now, planned.stable_until
    assert until >= now
    if until == now:
        event("varies with the clock")
        return
    event("stable for a while" if until < now + 30 * 24 * HOUR else "stable for good")
    end = min(until, now + 30 * 24 * HOUR)
    later = now + (end - now) * where if where < 1.0 else end - 0.001
    if later <= now:
        return
    moved = replace(snapshot, now=later)
    assert still_holds(planned, snapshot, moved)
    assert plan(moved, policy) == planned, (later - now, until - now)


@SETTINGS
@given(snapshots(), budgets(), LATER)
def test_a_plan_holds_until_its_horizon(snapshot: Snapshot, policy: Policy, where: float) -> None:
    _same_until_the_horizon(snapshot, policy, where)


@settings(max_examples=40, deadline=None)
@given(busy(), budgets(), LATER)
def test_a_busy_plan_holds_until_its_horizon(
    snapshot: Snapshot, policy: Policy, where: float
) -> None:
    _same_until_the_horizon(snapshot, policy, where)


def test_the_horizon_is_the_next_starvation() -> None:
    """Nothing else in the way: the plan holds until the waiting job starts starving, and the
    plan at that time differs (it reserves the node)."""
    waiting = pending(1, "a", gpus=8, submitted=NOW - 600)
    full = running(100, "b", {"n1": 1}, gpus=8, started=NOW - HOUR, max_runtime=10 * HOUR)
    snap = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=0, limit=8), team("b", guarantee=8, limit=8)),
        running=(full,),
        pending=(waiting,),
    )
    policy = Policy(starvation_seconds=3600.0, reclaim=False, preemption=False)
    planned = plan(snap, policy)
    assert planned.stable_until == NOW - 600 + 3600
    assert plan(replace(snap, now=planned.stable_until), policy) != planned


def test_the_horizon_is_the_end_of_a_minimum_runtime() -> None:
    """A high-priority job waits for its team's low-priority job to leave its minimum runtime;
    the plan holds until then and preempts after."""
    low = running(100, "a", {"n1": 1}, gpus=8, started=NOW - 60)
    urgent = pending(1, "a", gpus=8, priority=5)
    snap = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8, limit=8),),
        running=(low,),
        pending=(urgent,),
    )
    policy = Policy(min_runtime_seconds=300.0, starvation_seconds=10 * HOUR)
    planned = plan(snap, policy)
    assert not planned.preemptions and planned.stable_until == NOW - 60 + 300
    assert plan(replace(snap, now=planned.stable_until), policy).preemptions


def test_a_reservation_behind_an_overdue_job_varies_with_the_clock() -> None:
    """The running job should have ended an hour ago: the starving job's reservation starts
    "now", whatever now is, so no later time is known to give the same plan."""
    overdue = running(100, "b", {"n1": 1}, gpus=8, started=NOW - 3 * HOUR, max_runtime=2 * HOUR)
    starving = pending(1, "a", gpus=8, submitted=NOW - 2 * HOUR)
    snap = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=0, limit=8), team("b", guarantee=8, limit=8)),
        running=(overdue,),
        pending=(starving,),
    )
    planned = plan(snap, Policy(starvation_seconds=HOUR, reclaim=False, preemption=False))
    assert planned.reservations and planned.reservations[0].expected_start == NOW
    assert planned.stable_until == NOW


def _same_for_balances_answering_alike(
    snapshot: Snapshot, policy: Policy, data: st.DataObject
) -> None:
    """Each balance moved anywhere the plan's checks of it still answer alike (between the
    nearest bounds it was found at or above and below), or anywhere when it was not checked."""
    planned = plan(snapshot, policy)
    if snapshot.share_balance is None or planned.stable_until <= snapshot.now:
        return  # no balances, or a plan that is never kept
    moved = {}
    for key in snapshot.share_balance:
        lo, hi = -20 * HOUR, 20 * HOUR
        for (checked, bound), below in planned.balance_checks.items():
            if checked == key:
                lo, hi = (lo, min(hi, bound)) if below else (max(lo, bound), hi)
        # Drawn in [lo, hi) itself: lo + (hi - lo) * 0.9999999999999999 rounds to hi.
        moved[key] = lo if lo == hi else data.draw(st.floats(lo, hi, exclude_max=True))
    event(f"{min(len(planned.balance_checks), 3)}+ checks")
    other = replace(snapshot, share_balance=moved)
    assert still_holds(planned, snapshot, other)
    assert plan(other, policy) == planned


@SETTINGS
@given(snapshots(), budgets(), st.data())
def test_a_plan_holds_for_balances_that_answer_its_checks_alike(
    snapshot: Snapshot, policy: Policy, data: st.DataObject
) -> None:
    """Share balances move at every cycle: the plan holds for any balances that give the same
    answers to the comparisons it made (`Plan.balance_checks`)."""
    _same_for_balances_answering_alike(snapshot, policy, data)


@settings(max_examples=60, deadline=None)
@given(busy(), budgets(), st.data())
def test_a_busy_plan_holds_for_balances_that_answer_its_checks_alike(
    snapshot: Snapshot, policy: Policy, data: st.DataObject
) -> None:
    _same_for_balances_answering_alike(snapshot, policy, data)


def test_a_debt_past_the_threshold_is_a_different_answer() -> None:
    """A team borrowing with a small debt is admitted; deep in debt it would wait. The plan's
    checks must tell the two apart, and a debt on the same side of every bound must not."""
    snap = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=0, limit=8), team("b", guarantee=8, limit=8)),
        running=(),
        # Team b asks for more than the node (its share is its guarantee): a borrows.
        pending=(pending(1, "a", gpus=4), pending(2, "b", workers=2, gpus=8)),
        share_balance={("a", "h100"): -1.0},
    )
    # The borrowing threshold (600 s x 4 GPUs) apart from the ordering's bound (half a slice).
    policy = Policy(time_based_share=True, share_borrow_debt_seconds=600.0)
    planned = plan(snap, policy)
    assert [(a.job_id, a.borrowed) for a in planned.admissions] == [(1, True)]
    for debt in (2.0, 3000.0, 30 * 24 * HOUR):
        moved = replace(snap, share_balance={("a", "h100"): -debt})
        holds = still_holds(planned, snap, moved)
        assert holds <= (plan(moved, policy) == planned), debt  # it holds: the same plan
    deep = replace(snap, share_balance={("a", "h100"): -30 * 24 * HOUR})
    assert not still_holds(planned, snap, deep)
    assert not still_holds(planned, snap, replace(snap, now=NOW + 1, running=(), pending=()))


def test_the_horizon_is_the_last_time_a_job_can_backfill_before_a_reservation() -> None:
    """A starving gang holds the node until its running job ends (in 2 h); a 1.5 h job may
    use the held GPUs now, and until 30 minutes from now: the plan holds until then and
    refuses the backfill after."""
    busy_until = running(100, "b", {"n1": 1}, gpus=4, started=NOW - HOUR, max_runtime=3 * HOUR)
    gang = pending(1, "a", gpus=8, submitted=NOW - 5 * HOUR)
    short = pending(2, "a", gpus=4, submitted=NOW, max_runtime=1.5 * HOUR)
    snap = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8, limit=8), team("b", guarantee=0, limit=8)),
        running=(busy_until,),
        pending=(gang, short),
    )
    policy = Policy(starvation_seconds=4 * HOUR, reclaim=False, preemption=False)
    planned = plan(snap, policy)
    assert [a.job_id for a in planned.admissions] == [2]
    assert planned.reservations[0].expected_start == NOW + 2 * HOUR
    assert planned.stable_until == NOW + 0.5 * HOUR
    after = plan(replace(snap, now=planned.stable_until + 1), policy)
    assert not after.admissions


def test_the_horizon_is_a_checkpoint_deadline() -> None:
    """A job preempted for a job that started elsewhere is withdrawn while it may still be
    saving its checkpoint: the plan holds until the deadline, and after it the job is left
    to stop."""
    victim = running(
        20,
        "b",
        {"n1": 1},
        gpus=8,
        started=NOW - 5 * HOUR,
        preempting_since=NOW - 30,
        checkpoint_grace=600,
        preempted_for=1,
    )
    snap = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8), node("n2", h100=8)),
        teams=(team("a", guarantee=8), team("b")),
        running=(victim, running(1, "a", {"n2": 1}, gpus=8, started=NOW - 10)),
        pending=(),
    )
    planned = plan(snap, Policy())
    assert planned.withdrawals == (20,)
    assert planned.stable_until == NOW - 30 + 600
    assert plan(replace(snap, now=planned.stable_until), Policy()).withdrawals == ()


def test_the_horizon_is_the_end_of_a_borrowers_settling_time() -> None:
    """Reclaim beyond a guarantee takes only borrowed work that ran
    Policy.reclaim_min_runtime_seconds: the plan holds until the borrower has, and preempts
    it then."""
    snap = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8), node("n2", h100=8)),
        teams=(team("a", guarantee=0), team("b", guarantee=0)),
        running=(
            running(100, "b", {"n1": 1}, gpus=8, started=NOW - HOUR),
            running(101, "b", {"n2": 1}, gpus=8, started=NOW - 0.5 * HOUR),
        ),
        pending=(pending(1, "a", gpus=8),),
    )
    policy = Policy(starvation_seconds=100 * HOUR, reclaim_min_runtime_seconds=2 * HOUR)
    planned = plan(snap, policy)
    assert not planned.preemptions
    assert planned.stable_until == NOW - HOUR + 2 * HOUR
    later = plan(replace(snap, now=planned.stable_until), policy)
    assert [p.job_id for p in later.preemptions] == [100]


def test_the_horizon_is_the_end_a_reservation_waits_for() -> None:
    """A starving gang's reservation starts when the running job should end: until then its
    start is that end; once the job is overdue, the start is "now" and moves with the
    clock."""
    ends = running(100, "b", {"n1": 1}, gpus=8, started=NOW - HOUR, max_runtime=2 * HOUR)
    snap = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=0, limit=8), team("b", guarantee=8, limit=8)),
        running=(ends,),
        pending=(pending(1, "a", gpus=8, submitted=NOW - 2 * HOUR),),
    )
    policy = Policy(starvation_seconds=HOUR, reclaim=False, preemption=False)
    planned = plan(snap, policy)
    assert planned.reservations[0].expected_start == NOW + HOUR
    assert planned.stable_until == NOW + HOUR
    later = plan(replace(snap, now=NOW + HOUR + 60), policy)
    assert later.reservations[0].expected_start == NOW + HOUR + 60
    assert later.stable_until == NOW + HOUR + 60
