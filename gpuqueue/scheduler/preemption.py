"""Victim search: which running jobs to preempt so that a whole gang fits.

Two kinds of preemption, each switchable in the Policy:
- priority: a job may preempt lower-priority preemptible jobs of its own team;
- reclaim: a team that stays within its fair share after admitting the job may preempt preemptible
  work of teams above their fair share, but only as far as each victim team (and department, when
  the victim is in another department) stays at or above its own fair share. That last condition
  is what prevents ping-pong: a victim never ends below its share, so it never has a claim to
  reclaim the GPUs back.
- reclaim for a guarantee: when that finds no room and the job fits within its team's guarantee,
  the search runs again with each victim team kept at or above min(its guarantee, its fair
  share) instead. A guarantee beats borrowing even when the only victims are bigger than the
  need (a 2 x 8 gang taken to start a 1 x 8): the victim team may end below its fair share, but
  the claimant ends within its own share (`may_reclaim`), so it is never above its share and
  the victim has no claim on its GPUs; and no victim team ends below its own guarantee.

The search runs on the ledger: each candidate is released (its GPUs become incoming), the gang is
tried on free plus incoming GPUs, and the whole attempt is rolled back if it does not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Mapping
from itertools import chain, islice
from typing import TypeVar

from gpuqueue.scheduler.horizon import Horizon
from gpuqueue.scheduler.ledger import FlavorLedger, Ledger
from gpuqueue.scheduler.model import PendingJob, Policy, RunningJob

_T = TypeVar("_T")

PRIORITY = "priority"
RECLAIM = "reclaim"

VictimKey = tuple[int, float, int]


# Rule 1. Reclaim candidates (borrowed work of other teams) come before the team's own
#         lower-priority work: borrowed capacity is the first thing meant to go back.
# Rule 1b. Among reclaim candidates, those flagged idle under a flavor whose policy says so
#         (`RunningJob.idle_reclaim_first`) first: idle borrowed GPUs cost nobody any work.
# Rule 2. Among candidates, the lowest priority first.
# Rule 3. Then the most recently started (least work lost).
# Rule 4. Then the larger job id, so that the order is total.
def victim_key(job: RunningJob) -> VictimKey:
    return (job.priority, -job.started_at, -job.id)


def reclaim_key(job: RunningJob) -> bool:
    return not job.idle_reclaim_first


class VictimIndex:
    """Preemptible running jobs per (team, flavor), each list sorted by `victim_key` the first
    time a search asks for it (the running jobs do not change during a cycle)."""

    def __init__(self, running: tuple[RunningJob, ...]) -> None:
        self._raw: dict[tuple[str, str], list[RunningJob]] = {}
        # The lowest priority per (team, flavor): `has_lower` asks it of most jobs that reach
        # a victim search, and the answer needs no sorted list.
        self.lowest: dict[tuple[str, str], int] = {}
        raw = self._raw
        lowest = self.lowest
        for job in running:
            if job.preemptible and job.preempting_since is None:
                key = (job.team, job.flavor)
                jobs = raw.get(key)
                if jobs is None:
                    raw[key] = [job]
                    lowest[key] = job.priority
                else:
                    jobs.append(job)
                    if job.priority < lowest[key]:
                        lowest[key] = job.priority
        self._sorted: dict[tuple[str, str], list[RunningJob]] = {}
        # Flavors with a job that rule 1b puts first: the others keep victim_key's order as is.
        self.idle_first_flavors = {job.flavor for job in running if job.idle_reclaim_first}
        self.teams_by_flavor: dict[str, list[str]] = {}
        for team, flavor in sorted(self._raw):
            self.teams_by_flavor.setdefault(flavor, []).append(team)

    def of(self, team: str, flavor: str) -> list[RunningJob]:
        key = (team, flavor)
        jobs = self._sorted.get(key)
        if jobs is None:
            jobs = self._sorted[key] = sorted(self._raw.get(key, ()), key=victim_key)
        return jobs


class VictimSearch:
    """One cycle's victim searches, sharing the index, the ledger and the fair shares."""

    def __init__(
        self,
        ledger: Ledger,
        index: VictimIndex,
        fair_share: Mapping[tuple[str, str], int],
        chains: Mapping[str, tuple[str, ...]],
        policy: Policy,
        horizon: Horizon,
        guarantees: Mapping[tuple[str, str], int] | None = None,
        balance: Mapping[tuple[str, str], float] | None = None,
    ) -> None:
        self.ledger = ledger
        self.index = index
        self.fair_share = fair_share
        self.chains = chains
        self.policy = policy
        self.horizon = horizon
        self.guarantees = guarantees or {}
        self.balance = balance  # Snapshot.share_balance
        # What a victim team keeps, per (group, flavor): its fair share, or in a search for a
        # guarantee min(guarantee, fair share) (`find`).
        self.keep: Mapping[tuple[str, str], int] = fair_share
        # (group, flavor) -> min(guarantee, fair share), and the flavors where that is below
        # some group's share: elsewhere a search for a guarantee would repeat the first.
        self.guarantee_floor = {
            key: min(self.guarantees.get(key, 0), share) for key, share in fair_share.items()
        }
        self._floor_below_share = {
            key[1] for key, floor in self.guarantee_floor.items() if floor < fair_share[key]
        }

    def has_lower(self, job: PendingJob) -> bool:
        """Whether its own team runs anything preemptible of lower priority (a cheap early exit)."""
        lowest = self.index.lowest.get((job.team, job.flavor))
        return lowest is not None and lowest < job.priority

    def may_reclaim(self, job: PendingJob) -> bool:
        """A team (and its department) must stay within its fair share after admitting `job`."""
        in_use = self.ledger.in_use
        fair_share = self.fair_share
        flavor = job.flavor
        gpus = job.gpus
        for group in self.chains.get(job.team, (job.team,)):
            if in_use(group, flavor) + gpus > fair_share.get((group, flavor), 0):
                return False
        return True

    def _victim_ok(self, job: PendingJob, victim: RunningJob) -> bool:
        """A victim team (and its department, if not the job's) stays at or above its share."""
        mine = self.chains.get(job.team, (job.team,))
        for group in self.chains.get(victim.team, (victim.team,)):
            if group in mine:
                continue  # inside a shared department only the teams' shares matter
            share = self.keep.get((group, victim.flavor), 0)
            left = self.ledger.in_use(group, victim.flavor) - victim.gpus
            if left < share:
                return False
            if (
                left <= 0
                and group == victim.team
                and self.policy.min_one_job
                and not self.within_guarantee(job)
                and not self._in_debt(victim)
            ):
                # A team with no share keeps its last job (ordering.py, rule 1), except
                # against a team that claims its guarantee: guarantees are never waived;
                # and, with time-based fair share, except when the team is in debt.
                return False
        return True

    def _in_debt(self, victim: RunningJob) -> bool:
        """The victim's team held Policy.share_slice_seconds of the victim's GPUs more than it
        was entitled to (usage.py); never without balances."""
        if self.balance is None:
            return False
        # A debt (minus the balance) past a slice of the victim's GPUs.
        bound = -self.policy.share_slice_seconds * victim.gpus
        return self.horizon.below(self.balance, (victim.team, victim.flavor), bound)

    def within_guarantee(self, job: PendingJob) -> bool:
        return all(
            self.ledger.in_use(group, job.flavor) + job.gpus
            <= self.guarantees.get((group, job.flavor), 0)
            for group in self.chains.get(job.team, (job.team,))
        )

    def protected_until(self, victim: RunningJob) -> float:
        """When `victim`'s minimum runtime ends: it may not be preempted before."""
        until = victim.min_runtime_until
        if until is None:
            until = victim.started_at + self.policy.min_runtime_seconds
        return until

    def protection_ends(self, job: PendingJob) -> list[float]:
        """When the reclaim candidates for `job` that are inside their minimum runtime now
        leave it, earliest first (each time once)."""
        ends = {
            until
            for victim, _ in islice(
                self._candidates(job, True, False), self.policy.max_victim_candidates
            )
            if victim.id not in self.ledger.victims
            and not self.horizon.passed(until := self.protected_until(victim))
        }
        return sorted(ends)

    def _candidates(
        self, job: PendingJob, reclaim: bool, priority: bool
    ) -> Iterator[tuple[RunningJob, str]]:
        if reclaim:
            lists = []
            for team in self.index.teams_by_flavor.get(job.flavor, ()):
                if team == job.team:
                    continue
                share = self.keep.get((team, job.flavor), 0)
                if self.ledger.in_use(team, job.flavor) > share:
                    lists.append(self.index.of(team, job.flavor))
            # One sort of the sorted lists together (C-level: it finds and merges the runs)
            # rather than heapq.merge, a Python generator: the keys are unique (job ids).
            merged = lists[0] if len(lists) == 1 else sorted(chain(*lists), key=victim_key)
            if job.flavor in self.index.idle_first_flavors:
                merged = sorted(merged, key=reclaim_key)  # rule 1b (stable: victim_key kept)
            for victim in merged:
                yield victim, RECLAIM
        if priority:
            for victim in self.index.of(job.team, job.flavor):
                if victim.priority >= job.priority:
                    break  # sorted by priority: nothing further is lower
                yield victim, PRIORITY

    def _workers_delta(
        self, fl: FlavorLedger, victim: RunningJob, job: PendingJob, sign: int
    ) -> int:
        """How many more of `job`'s workers fit once `victim` is released (sign=1) or
        restored (sign=-1): only its own nodes change, so the count is kept incrementally. On
        a limited node the victim's CPU, memory and pods come back (or stop coming) too."""
        g = job.gpus_per_worker
        limited = fl.room is not None
        delta = 0
        for node, workers in victim.placement:
            free = fl.free.get(node)
            if free is None:
                continue
            base = _available(fl, node)
            after = base + sign * workers * victim.gpus_per_worker
            if limited and node in fl.allocatable:
                cpu, memory, pods = victim.room_on(node, workers)
                ask = (sign * cpu, sign * memory, sign * pods)
                delta += fl.workers_with(node, after, ask, job) - fl.workers_with(
                    node, base, (0, 0, 0), job
                )
            else:
                delta += after // g - base // g
        return delta

    def find(
        self,
        job: PendingJob,
        fl: FlavorLedger,
        limit_ok: Callable[[], bool],
        reclaim: bool,
        priority: bool,
        budget: int,
        at: float | None = None,
    ) -> list[tuple[RunningJob, str]] | None:
        """Victims that let `job` fit, leaving them released in the ledger; or None, untouched.
        `at`: the time minimum runtimes are judged at (now unless told: reclaim_wait.py asks
        what a later search would find).

        Victim teams keep their fair shares; when no such victims make room and the job fits
        within its guarantee and its team's fair share, they keep only min(guarantee, fair
        share) (the module's docstring): the cheaper search for the borrowers first, the
        guarantee always.
        """
        found = self._find(job, fl, limit_ok, reclaim, priority, budget, at)
        if (
            found is not None
            or not reclaim
            or job.flavor not in self._floor_below_share
            or not self.within_guarantee(job)
            or not self.may_reclaim(job)  # an owed team may reclaim past its share: not so
        ):
            return found
        self.keep = self.guarantee_floor
        try:
            return self._find(job, fl, limit_ok, reclaim, priority, budget, at)
        finally:
            self.keep = self.fair_share

    def for_room(
        self,
        job: PendingJob,
        eligible: Container[str],
        fits: Callable[[], bool],
        budget: int,
    ) -> list[RunningJob] | None:
        """Reclaim for a job that `find` cannot serve (a fraction of a GPU, or bound to GPU
        models: engine `_decide_shared`), within its guarantee: whole-GPU borrowed work of
        other teams with a worker on an `eligible` node, in rule order, each victim team kept
        at its fair share and, failing that, at min(guarantee, fair share) as in `find`; taken
        one by one until `fits()`, at most `budget`. Returns the victims, released in the
        ledger, or None with the ledger untouched. Fractional work is never a victim: what a
        fraction frees is part of one GPU, which no incoming count can hold."""
        ledger = self.ledger
        passed = self.horizon.passed
        try:
            for keep in (self.fair_share, self.guarantee_floor):
                self.keep = keep
                mark = ledger.checkpoint()
                chosen: list[RunningJob] = []
                for victim, _ in islice(
                    self._candidates(job, True, False), self.policy.max_victim_candidates
                ):
                    if (
                        victim.id in ledger.victims
                        or victim.gpu_milli
                        or not any(node in eligible for node, _ in victim.placement)
                        or not passed(self.protected_until(victim))
                        or not self._victim_ok(job, victim)
                    ):
                        continue
                    ledger.release(victim)
                    chosen.append(victim)
                    if fits():
                        ledger.commit(mark)
                        return chosen
                    if len(chosen) >= budget:
                        break
                ledger.rollback(mark)
        finally:
            self.keep = self.fair_share
        return None

    def _find(
        self,
        job: PendingJob,
        fl: FlavorLedger,
        limit_ok: Callable[[], bool],
        reclaim: bool,
        priority: bool,
        budget: int,
        at: float | None,
    ) -> list[tuple[RunningJob, str]] | None:
        """`find` with the victim teams keeping `self.keep`.

        1. Take the candidates in rule order, at most policy.max_victim_candidates of them,
           leaving out jobs already chosen and jobs inside their minimum runtime.
        2. First try them in rule order, globally (`_in_order`); if that does not make room,
           try node by node (`_by_node`): victims spread over many nodes may free plenty of GPUs
           and still no whole worker, where the same number on one node would do; last, where
           the next worker is cheapest (`_cheapest_first`): a team's spare share may buy one
           worker on each of three nodes, where spent on one node it buys one.
        3. Give back every victim that turns out not to be needed, most valuable first, so that
           the fewest jobs are preempted.
        4. Refuse (and roll back) when more victims than `budget` would be needed.

        Candidates are counted against max_victim_candidates before the runtime filters, as
        they always were, so that the filters change which jobs qualify and nothing else.
        """
        ledger = self.ledger
        candidates = self.eligible(job, reclaim, priority, at)
        if not candidates:
            return None
        g = job.gpus_per_worker
        start = fl.workers_fit(g, fl.incoming, job.cpu_per_worker, job.memory_per_worker, True)
        # The cut counts GPUs alone (an upper bound): a victim's CPU can add a worker on a
        # node whose GPUs were free already.
        by_gpus = start if fl.room is None else fl.workers_by_gpus(g, fl.incoming)
        if not self._may_fit(job, fl, candidates, by_gpus):
            return None
        for strategy in (self._in_order, self._by_node, self._cheapest_first):
            mark = ledger.checkpoint()
            found = strategy(job, fl, candidates, start, limit_ok, budget)
            if found is None:
                ledger.rollback(mark)
                continue
            chosen, fit = found
            for pair in reversed(chosen[:-1]):
                less = fit + self._workers_delta(fl, pair[0], job, -1)
                ledger.unrelease(pair[0])
                if less >= job.workers and limit_ok():
                    chosen.remove(pair)
                    fit = less
                else:
                    ledger.release(pair[0])
            ledger.commit(mark)
            return chosen
        return None

    def eligible(
        self, job: PendingJob, reclaim: bool, priority: bool, at: float | None = None
    ) -> list[tuple[RunningJob, str]]:
        """Step 1 of `_find`: the candidates in rule order, at most
        policy.max_victim_candidates of them, less jobs already chosen and jobs inside their
        minimum runtime (topology.py searches a domain's with them too)."""
        ledger = self.ledger
        # Hysteresis: a team that reclaims beyond its guarantee (for its fair share, which moves
        # with every team's demand) takes only work that ran Policy.reclaim_min_runtime_seconds,
        # so that borrowed GPUs do not change hands each time the shares move.
        beyond_guarantee = reclaim and not self.within_guarantee(job)
        settle = self.policy.reclaim_min_runtime_seconds
        passed = self.horizon.passed
        candidates = []
        for victim, kind in islice(
            self._candidates(job, reclaim, priority), self.policy.max_victim_candidates
        ):
            if victim.id in ledger.victims:
                continue
            until = self.protected_until(victim)
            if not (passed(until) if at is None else at >= until):
                continue
            if kind == RECLAIM and beyond_guarantee and not passed(victim.started_at + settle):
                continue
            candidates.append((victim, kind))
        return candidates

    def each_floor(
        self, job: PendingJob, reclaim: bool, attempt: Callable[[], _T | None]
    ) -> _T | None:
        """`attempt` (a search of its own, topology.py) with the victim teams keeping their
        fair shares, then, where `find` would, only min(guarantee, fair share)."""
        found = attempt()
        if (
            found is not None
            or not reclaim
            or job.flavor not in self._floor_below_share
            or not self.within_guarantee(job)
            or not self.may_reclaim(job)
        ):
            return found
        self.keep = self.guarantee_floor
        try:
            return attempt()
        finally:
            self.keep = self.fair_share

    def take(self, job: PendingJob, fl: FlavorLedger, victim: RunningJob, kind: str) -> bool:
        """Release one victim if its team can give it up (`_take`)."""
        return self._take(job, fl, victim, kind) >= 0

    def _may_fit(
        self,
        job: PendingJob,
        fl: FlavorLedger,
        candidates: list[tuple[RunningJob, str]],
        fit: int,
    ) -> bool:
        """Whether the candidates could make room at all (necessary conditions, cheap next to
        the search; most searches of a busy replay or forecast fail, and most of them here):
        1. free and incoming GPUs plus what the candidates could give cover the gang;
        2. node by node, the workers that would fit with every candidate there gone (`fit`
           workers fit now) are enough.

        A reclaim victim is taken only while its team keeps what `keep` leaves it (its fair
        share, or in a search for a guarantee less: `_victim_ok`), and nothing the search does
        raises a team's usage: a team gives at most what it holds beyond that at the start, in
        all and on any one node, and none of its jobs bigger than that. (Without that cap on
        each node, most searches for one 8-GPU worker that fail got past the condition: a
        team's spare GPUs spread over several nodes.)
        """
        total = fl.total_free + sum(fl.incoming.values())
        mine = self.chains.get(job.team, (job.team,))
        flavor = job.flavor
        free = fl.free
        beyond: dict[str, int] = {}  # team -> GPUs it holds beyond its share
        given: dict[str, int] = {}  # team -> GPUs of its candidates that fit in that
        on_node: dict[str, int] = {}  # node -> GPUs of candidates that keep no share
        capped: dict[tuple[str, str], int] = {}  # (node, team) -> GPUs of its candidates there
        for victim, kind in candidates:
            team = victim.team
            if kind != RECLAIM or team in mine:
                total += victim.gpus  # no share to keep
                for node, workers in victim.placement:
                    if node in free:
                        gpus = workers * victim.gpus_per_worker
                        on_node[node] = on_node.get(node, 0) + gpus
                continue
            extra = beyond.get(team)
            if extra is None:
                extra = beyond[team] = self.ledger.in_use(team, flavor) - self.keep.get(
                    (team, flavor), 0
                )
            if victim.gpus <= extra:
                given[team] = given.get(team, 0) + victim.gpus
                for node, workers in victim.placement:
                    if node in free:
                        key = (node, team)
                        capped[key] = capped.get(key, 0) + workers * victim.gpus_per_worker
        for team, gpus in given.items():
            total += min(gpus, beyond[team])
        if total < job.gpus:
            return False
        for (node, team), gpus in capped.items():
            on_node[node] = on_node.get(node, 0) + min(gpus, beyond[team])
        g = job.gpus_per_worker
        for node, gpus in on_node.items():
            base = _available(fl, node)
            fit += (base + gpus) // g - base // g
        return fit >= job.workers

    def _take(self, job: PendingJob, fl: FlavorLedger, victim: RunningJob, kind: str) -> int:
        """Release one victim if its team can give it up; the workers it adds (-1: refused)."""
        if victim.id in self.ledger.victims:
            return -1
        if kind == RECLAIM and not self._victim_ok(job, victim):
            return -1
        delta = self._workers_delta(fl, victim, job, 1)
        self.ledger.release(victim)
        return delta

    def _in_order(
        self,
        job: PendingJob,
        fl: FlavorLedger,
        candidates: list[tuple[RunningJob, str]],
        fit: int,
        limit_ok: Callable[[], bool],
        budget: int,
    ) -> tuple[list[tuple[RunningJob, str]], int] | None:
        chosen: list[tuple[RunningJob, str]] = []
        for victim, kind in candidates:
            delta = self._take(job, fl, victim, kind)
            if delta < 0:
                continue
            fit += delta
            chosen.append((victim, kind))
            if len(chosen) > budget:
                return None
            if fit >= job.workers and limit_ok():
                return chosen, fit
        return None

    def _by_node(
        self,
        job: PendingJob,
        fl: FlavorLedger,
        candidates: list[tuple[RunningJob, str]],
        fit: int,
        limit_ok: Callable[[], bool],
        budget: int,
    ) -> tuple[list[tuple[RunningJob, str]], int] | None:
        """1. Group the candidates by the nodes they sit on.
        2. Visit nodes with the most GPUs already available first (the fewest victims needed),
           skipping nodes that could not hold one worker even with every candidate gone.
        3. On each node release candidates in rule order, one batch per extra worker, until the
           gang fits or the node can gain no more; a batch that gains no worker is given back.
        """
        g = job.gpus_per_worker
        ledger = self.ledger
        on_node = _on_nodes(fl, candidates)
        potential = {
            node: _available(fl, node) + sum(gpus for _, gpus, _ in here)
            for node, here in on_node.items()
        }
        order = sorted(
            (n for n in on_node if potential[n] // g > _available(fl, n) // g),
            key=lambda n: (-_available(fl, n), n),
        )
        chosen: list[tuple[RunningJob, str]] = []
        for node in order:
            queue = iter(on_node[node])
            most = potential[node] // g
            while fit < job.workers and _available(fl, node) // g < most:
                # One batch: victims until one more worker fits somewhere. A batch that ends
                # without a new worker is given back, so that no team's spare share is spent
                # on GPUs that do not help.
                mark = ledger.checkpoint()
                before_fit, before_count = fit, len(chosen)
                for victim, _, kind in queue:
                    delta = self._take(job, fl, victim, kind)
                    if delta < 0:
                        continue
                    fit += delta
                    chosen.append((victim, kind))
                    if fit > before_fit:
                        break
                if fit == before_fit:
                    ledger.rollback(mark)
                    del chosen[before_count:]
                    break
                ledger.commit(mark)
                if len(chosen) > budget:
                    return None
            if fit >= job.workers and limit_ok():
                return chosen, fit
        return None

    def _cheapest_first(
        self,
        job: PendingJob,
        fl: FlavorLedger,
        candidates: list[tuple[RunningJob, str]],
        fit: int,
        limit_ok: Callable[[], bool],
        budget: int,
    ) -> tuple[list[tuple[RunningJob, str]], int] | None:
        """The last resort, when rule order and node by node both failed.

        1. Group the candidates by the nodes they sit on (in rule order on each node).
        2. Gain one worker at a time where it is cheapest: on the node whose next worker needs
           the fewest GPUs released (then the fewest victims, the most GPUs already available).
           With a team's spare share as the only currency this spends it where it buys most:
           one GPU on each of three nodes can make three workers where three on one make one.
        3. A victim its team cannot give up (`_victim_ok`) stays refused for the search: a
           team's usage only falls while victims are released.
        """
        g = job.gpus_per_worker
        ledger = self.ledger
        on_node = _on_nodes(fl, candidates)
        refused: set[int] = set()
        chosen: list[tuple[RunningJob, str]] = []
        while fit < job.workers:
            best: tuple[tuple[int, int, int, str], list[tuple[RunningJob, str]]] | None = None
            for node, here in on_node.items():
                have = _available(fl, node)
                need = g - have % g  # GPUs to release for one more worker here
                got, batch = 0, []
                for victim, gpus, kind in here:
                    if victim.id in ledger.victims or victim.id in refused:
                        continue
                    got += gpus
                    batch.append((victim, kind))
                    if got >= need:
                        break
                if got < need:
                    continue
                key = (got, len(batch), -have, node)
                if best is None or key < best[0]:
                    best = (key, batch)
            if best is None:
                return None
            mark = ledger.checkpoint()
            before_fit, before_count, before_refused = fit, len(chosen), len(refused)
            for victim, kind in best[1]:
                delta = self._take(job, fl, victim, kind)
                if delta < 0:
                    refused.add(victim.id)
                    continue
                fit += delta
                chosen.append((victim, kind))
            if fit == before_fit:
                ledger.rollback(mark)
                del chosen[before_count:]
                if len(refused) == before_refused:
                    return None  # nothing to try without
                continue  # a victim was refused: try again without it
            ledger.commit(mark)
            if len(chosen) > budget:
                return None
        return (chosen, fit) if limit_ok() else None


def _available(fl: FlavorLedger, node: str) -> int:
    """GPUs of a node a worker could use now: free ones, and those coming back from victims."""
    return max(fl.free[node], 0) + fl.incoming.get(node, 0)


def _on_nodes(
    fl: FlavorLedger, candidates: list[tuple[RunningJob, str]]
) -> dict[str, list[tuple[RunningJob, int, str]]]:
    """node -> (victim, its GPUs on that node, kind), in rule order, for the flavor's
    schedulable nodes."""
    on_node: dict[str, list[tuple[RunningJob, int, str]]] = {}
    for victim, kind in candidates:
        for node, workers in victim.placement:
            if node in fl.free:
                on_node.setdefault(node, []).append(
                    (victim, workers * victim.gpus_per_worker, kind)
                )
    return on_node
