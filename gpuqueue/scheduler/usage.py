"""Time-based fair share: what each team was entitled to over time against what it held.

A fair share is whole GPUs at one instant. A team whose smallest gang is bigger than its share
(a team with no guarantee while every GPU is someone's guarantee: its share is a fraction of a GPU
that rounds to 0) either never runs or, once it runs, holds far more than it is entitled to. Real
schedulers settle that over time: Slurm orders by usage decayed with a half-life, KAI Scheduler's
time-based fair share compares historical usage with the historical share. Here each team and
flavor carries a balance in GPU-seconds:

    balance' = -balance / tau + (entitled - held)        tau = half_life / ln 2

`entitled` is the team's max-min fair share of the flavor at that moment (docs/architecture.md:
guarantee first, then the idle rest by weight, capped by limit and by what it asks), kept as
a fraction of a GPU; `held` is what it holds. Positive: the team received less than its share over
the last half-lives (it is owed); negative: more (it is in debt). A team that holds and asks
nothing is entitled to nothing and holds nothing, so its balance only decays toward 0.

The engine reads the balances from `Snapshot.share_balance` (engine.py, ordering.py,
preemption.py: `Policy.share_slice_seconds`); `ShareBalance` keeps them for a caller that sees
the cluster cycle after cycle: the trace replay in memory, the live cycle from the balances and
the time it stored in PostgreSQL (gpuqueue/services/quotas/share_balance.py). Standard library only,
like the engine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from gpuqueue.scheduler.model import PendingJob, Quota, RunningJob, Team

Key = tuple[str, str]  # (team, flavor)


def entitled_shares(
    capacity: float, demand: Mapping[str, float], quotas: Mapping[str, Quota]
) -> dict[str, float]:
    """Max-min fair GPUs per team for one flavor, fractions kept.

    1. Every team that asks gets what it asks, up to its guarantee.
    2. What is left is shared by weight among the teams that still ask (water-filling: a team
       that needs less than its weighted part gives the rest back to the others).
    3. Nobody passes its limit or what it asks.
    """
    share: dict[str, float] = {}
    cap: dict[str, float] = {}
    for team in sorted(demand):
        d = demand[team]
        q = quotas.get(team)
        if q is None or d <= 0:
            continue
        share[team] = min(d, q.guarantee)
        cap[team] = min(d, q.limit)
    left = capacity - sum(share.values())
    active = [t for t in share if cap[t] > share[t] and quotas[t].weight > 0]
    while left > 1e-9 and active:
        per_weight = left / sum(quotas[t].weight for t in active)
        full = [t for t in active if share[t] + quotas[t].weight * per_weight >= cap[t]]
        if not full:
            for t in active:
                share[t] += quotas[t].weight * per_weight
            break
        for t in full:
            left -= cap[t] - share[t]
            share[t] = cap[t]
        active = [t for t in active if share[t] < cap[t]]
    return share


class ShareBalance:
    """The balances of every team and flavor, advanced by the caller from one cycle to the next.

    `advance(now, held, asked)` credits the time since the previous call with the state it is
    given (what the cycle sees now stood since the last cycle): GPUs held and GPUs asked for by
    pending jobs, per (team, flavor). Balances below 1 GPU-second are dropped. `balance` and
    `last` start it from stored balances and the time they were advanced to (the live cycle).
    """

    def __init__(
        self,
        teams: Sequence[Team],
        capacity: Mapping[str, int],
        half_life_seconds: float,
        balance: Mapping[Key, float] | None = None,
        last: float | None = None,
    ) -> None:
        self.capacity = dict(capacity)
        self.quotas: dict[str, dict[str, Quota]] = {
            f: {t.id: t.quotas[f] for t in teams if f in t.quotas} for f in sorted(capacity)
        }
        # 1/tau; 0 keeps the whole history.
        self.rate = math.log(2) / half_life_seconds if half_life_seconds > 0 else 0.0
        self.balance: dict[Key, float] = dict(balance or {})
        self.last: float | None = last

    def advance(
        self,
        now: float,
        held: Mapping[Key, int],
        asked: Mapping[Key, int],
        max_credit_seconds: float | None = None,
    ) -> None:
        """1. Decay every balance over the time since the last call.
        2. Add (entitled - held) over that time, integrated under the same decay; with
           `max_credit_seconds`, over at most that much of it, the most recent: a caller that
           did not see the cluster for a while (the live cycle after its worker was down)
           does not pretend that what it sees now stood all along. The whole gap still decays.
        """
        last, self.last = self.last, now
        if last is None or now <= last:
            return
        dt = now - last
        credited = dt if max_credit_seconds is None else min(dt, max_credit_seconds)
        if self.rate > 0:
            keep = math.exp(-self.rate * dt)
            # The integral of the decay over the credited part (the last `credited` seconds).
            kept = keep if credited == dt else math.exp(-self.rate * credited)
            weight = (1.0 - kept) / self.rate
        else:
            keep, weight = 1.0, credited
        balance = self.balance
        if keep != 1.0:
            for key in list(balance):
                value = balance[key] * keep
                if -1.0 < value < 1.0:
                    del balance[key]
                else:
                    balance[key] = value
        for key, gap in self.gaps(held, asked).items():
            if gap:
                balance[key] = balance.get(key, 0.0) + gap * weight

    def gaps(self, held: Mapping[Key, int], asked: Mapping[Key, int]) -> dict[Key, float]:
        """(entitled - held) GPUs per (team, flavor) that asks or holds: how fast each balance
        grows while this state stands, before the decay."""
        gaps: dict[Key, float] = {}
        for flavor, quotas in self.quotas.items():
            demand: dict[str, float] = {}
            for team in quotas:
                d = held.get((team, flavor), 0) + asked.get((team, flavor), 0)
                if d > 0:
                    demand[team] = d
            if not demand:
                continue
            shares = entitled_shares(self.capacity[flavor], demand, quotas)
            for team in demand:
                key = (team, flavor)
                gaps[key] = shares.get(team, 0.0) - held.get(key, 0)
        return gaps

    def crossing(self, key: Key, bound: float, gap: float) -> float:
        """Seconds after `last` until `balance < bound` changes its answer for `key` while its
        gap stays `gap` (a state that stands): math.inf when it never does."""
        return seconds_to_cross(self.balance.get(key, 0.0), bound, gap, self.rate)

    def snapshot(self) -> dict[Key, float]:
        """The balances now, for `Snapshot.share_balance` (a copy: the snapshot is frozen)."""
        return dict(self.balance)


def held_and_asked(
    running: Iterable[RunningJob], pending: Iterable[PendingJob]
) -> tuple[dict[Key, int], dict[Key, int]]:
    """GPUs held by running jobs and asked for by pending ones, per (team, flavor)."""
    held: dict[Key, int] = {}
    asked: dict[Key, int] = {}
    for r in running:
        held[(r.team, r.flavor)] = held.get((r.team, r.flavor), 0) + r.gpus
    for p in pending:
        asked[(p.team, p.flavor)] = asked.get((p.team, p.flavor), 0) + p.gpus
    return held, asked


def seconds_to_cross(start: float, bound: float, gap: float, rate: float) -> float:
    """Seconds until a balance at `start` reaches `bound` while it gains `gap` GPUs and decays
    at `rate` (1/tau): math.inf when it never does. It moves exponentially towards gap x tau
    (linearly without decay), so it reaches the bound once, when the bound lies between where
    it is and where it goes; one that sits on the bound flips `balance < bound` at once if it
    moves down."""
    goal = gap / rate if rate else math.copysign(math.inf, gap) if gap else start
    if start == bound:
        return 0.0 if goal < start else math.inf
    if not min(start, goal) < bound < max(start, goal):
        return math.inf
    if rate == 0:
        return (bound - start) / gap
    return math.log((start - goal) / (bound - goal)) / rate


def seconds_to_recover(
    debt: float, threshold: float, half_life_seconds: float, credit: float = 0.0
) -> float:
    """How long a debt of `debt` GPU-seconds takes to fall below `threshold` while the team
    holds `credit` GPUs less than it is entitled to (0: its share; no new debt either way): with
    no credit, half-lives of log2(debt / threshold). 0 when it is below already; math.inf when
    it never gets there (no decay and no credit, or a threshold of 0 and no credit)."""
    if debt <= threshold:
        return 0.0
    rate = math.log(2) / half_life_seconds if half_life_seconds > 0 else 0.0
    return seconds_to_cross(-debt, -threshold, credit, rate)
