"""The last plan, kept while nothing but the clock moved (the engine's horizon).

With 43,000 jobs waiting on a full cluster and nothing changing, planning again gave the same
plan every cycle and cost most of it. The engine says until when a plan holds if only the
clock moves (`Plan.stable_until`, scheduler/horizon.py); a cycle for which the change feed
read no changed job since the plan's own read (its `mark`: a forecast reading in between
counts too, cycle/job_feed.py) and whose snapshot is the last one but for its time keeps the
last plan before that time: its reasons and positions are on the rows already, so there is
nothing to write either. A plan that admitted, preempted or withdrew a preemption is never
kept (what it did changes the next snapshot anyway). Kept once its reasons are written;
GPUQUEUE_CACHES off plans every time (the plain path the tests compare with).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from gpuqueue.core import caches
from gpuqueue.cycle.job_feed import current_read
from gpuqueue.scheduler import model as m
from gpuqueue.scheduler.horizon import still_holds


@dataclass(frozen=True)
class _Last:
    snapshot: m.Snapshot  # the engine's input the plan was made from
    mark: int  # the change feed's mark of the read it was planned from
    policy: m.Policy
    plan: m.Plan


_kept: caches.Kept[str, _Last] = caches.Kept(
    max_entries=None, max_age_seconds=caches.CYCLE_MAX_AGE_SECONDS
)
_KEY = "last plan"


def kept_plan(snapshot: m.Snapshot, policy: m.Policy) -> m.Plan | None:
    """The last plan if it is still the plan of `snapshot` (the engine's input)."""
    last = _kept.get(_KEY, 1)
    if last is None:
        return None
    read = current_read()
    if read is None or read.mark != last.mark:  # a job changed since (or all were read)
        return None
    if last.policy != policy or not still_holds(last.plan, last.snapshot, snapshot):
        return None
    return last.plan


def keep_plan(snapshot: m.Snapshot, policy: m.Policy, plan: m.Plan, mark: int) -> None:
    """Keep `plan`, made from the feed's read `mark`, once the transaction commits (its
    reasons and positions are written)."""
    _kept.clear()
    if plan.admissions or plan.preemptions or plan.withdrawals:
        return
    if plan.stable_until <= snapshot.now:
        return
    kept = _Last(snapshot, mark, policy, plan)
    transaction.on_commit(lambda: _kept.put(_KEY, 1, kept))
