"""How long a plan stays the plan of its snapshot while only the clock moves.

The engine reads the time in a few comparisons (has a job waited long enough to starve, is a
running job still inside its minimum runtime, has borrowed work run long enough to be
reclaimed) and in a few values (a reservation that could start now, a debt that recovers in
an hour). Each comparison against a fixed time `at` flips when the clock reaches it; each
value computed from the clock changes as it moves. The plan records the earliest such time
after its `now` (`Plan.stable_until`): until then, the same snapshot at a later time gives the
same plan, so the admission cycle may keep the last plan instead of planning again when
nothing else changed (cycle/run.py). tests/scheduler/test_horizon.py checks it on generated
snapshots.

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


class Horizon:
    def __init__(self, now: float) -> None:
        self.now = now
        self.until = math.inf
        # (team, flavor), bound -> whether the balance was below the bound
        self.balance_checks: dict[tuple[Key, float], bool] = {}

    def below(self, balance: Mapping[Key, float], key: Key, bound: float) -> bool:
        """`balance[key] < bound` (a missing balance is 0), noted."""
        answer = balance.get(key, 0.0) < bound
        self.balance_checks[(key, bound)] = answer
        return answer

    def crossing(self, at: float) -> None:
        """A comparison of the clock with `at` was made: its answer flips when `now` reaches
        `at` (a time already past never flips again)."""
        if self.now < at < self.until:
            self.until = at

    def varies(self) -> None:
        """A value computed from the clock (or from a balance's value, not only its side of
        a bound) went into the plan: any other time may change it."""
        self.until = self.now


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
