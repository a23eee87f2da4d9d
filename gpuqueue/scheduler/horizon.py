"""The engine's clock: every reading of the time goes through it, and it records how long the
plan stays the plan of its snapshot while only the clock moves.

The engine compares the time with fixed times (has a job waited long enough to starve, is a
running job still inside its minimum runtime, has a checkpoint deadline passed) and computes a
few values from it (a reservation that could start now, a debt that recovers in an hour). Each
comparison flips when the clock reaches its time; each value changes as the clock moves. The
clock answers both and notes, as it answers, the earliest such time after `now`
(`Plan.stable_until`): until then, the same snapshot at a later time gives the same plan, so
the admission cycle may keep the last plan instead of planning again when nothing else
changed (cycle/kept_plan.py). A comparison made through the clock cannot forget its crossing;
only the comparisons a plan actually made are noted, so a branch never taken costs the plan no
stability. tests/scheduler/test_horizon.py checks the horizon on generated snapshots, and
tests/scheduler/test_clock_reads.py that no module `plan()` runs compares the time itself.

Share balances (time-based fair share, usage.py) move at every cycle too, and the engine reads
them only in comparisons with a bound (is the team in debt past a threshold): each answer is
noted (`below`), and the plan holds for other balances that give the same answers
(`Plan.balance_checks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from gpuqueue.scheduler.model import Plan, Snapshot

Key = tuple[str, str]  # (team, flavor)

# A time already come, "now, whenever that is": it sorts before every other time, and a value
# that stays AT_ONCE until it goes into the plan becomes the clock's time there (`read`).
AT_ONCE = -math.inf


class Horizon:
    """The clock of one plan (`now`, kept private: read it through the methods below)."""

    __slots__ = ("_now", "balance_checks", "stable_until")

    def __init__(self, now: float) -> None:
        self._now = now
        self.stable_until = math.inf
        # (team, flavor), bound -> whether the balance was below the bound
        self.balance_checks: dict[tuple[Key, float], bool] = {}

    def passed(self, at: float) -> bool:
        """Whether the clock has reached `at` (`now >= at`); a time still ahead is a crossing:
        the answer flips when the clock gets there."""
        if at <= self._now:
            return True
        if at < self.stable_until:
            self.stable_until = at
        return False

    def within(self, seconds: float, at: float) -> bool:
        """Whether `seconds` from now end by `at` (`now + seconds <= at`), noted: the answer
        flips once the clock passes `at - seconds`."""
        now = self._now
        answer = now + seconds <= at
        if answer:
            # True up to `at - seconds` included: the plan is made again from then on (from
            # the next representable time when that is now).
            self._crossing(max(at - seconds, math.nextafter(now, math.inf)))
        return answer

    def read(self) -> float:
        """The time itself, for a value that goes into the plan: any other time may change
        it, so the plan holds for no later time."""
        self.stable_until = self._now
        return self._now

    def until(self, at: float) -> float:
        """Seconds from now to `at` (a value: as `read`)."""
        return at - self.read()

    def below(self, balance: Mapping[Key, float], key: Key, bound: float) -> bool:
        """`balance[key] < bound` (a missing balance is 0), noted."""
        answer = balance.get(key, 0.0) < bound
        self.balance_checks[(key, bound)] = answer
        return answer

    def _crossing(self, at: float) -> None:
        if self._now < at < self.stable_until:
            self.stable_until = at


def still_holds(plan: Plan, planned: Snapshot, snapshot: Snapshot) -> bool:
    """Whether `snapshot` gives `plan`, made from `planned`, without planning again: the same
    snapshot but for its time and share balances, its time before the plan's horizon, and its
    balances answering the plan's comparisons alike."""
    if snapshot.now >= plan.stable_until:
        return False
    balance = snapshot.share_balance
    if (balance is None) != (planned.share_balance is None):
        return False
    if replace(snapshot, now=planned.now, share_balance=planned.share_balance) != planned:
        return False
    return balance is None or all(
        (balance.get(key, 0.0) < bound) == below
        for (key, bound), below in plan.balance_checks.items()
    )
