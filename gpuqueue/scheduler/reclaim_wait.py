"""Why a job entitled to its GPUs is not reclaiming them yet, and when it can.

A victim search leaves out jobs inside their minimum runtime (preemption.py). For a job within
its team's guarantee whose search failed, that protection may be all that stands in the way:
then its reason names the borrowing teams and the earliest time reclaim can start, instead of
"waiting for capacity".

1. List when the protected reclaim candidates leave their minimum runtime, earliest first; none
   protected: protection is not the cause.
2. Search as of the last of those times; no room even then: not the cause either.
3. Bisect the earlier times for the first one at which the search finds room (more candidates
   qualify as time passes, so a handful of searches do for hundreds of candidates).
4. Every search is a what-if on the ledger, rolled back: nothing is preempted.

Only a job whose own search ran and failed is asked (the engine's search budget bounds the
what-ifs per cycle); later jobs of its kind wait behind it in its team's queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpuqueue.scheduler import reasons
from gpuqueue.scheduler.ledger import FlavorLedger, Ledger
from gpuqueue.scheduler.model import PendingJob, PlacementStrategy, Reason, RunningJob
from gpuqueue.scheduler.placement import fit_gang
from gpuqueue.scheduler.preemption import RECLAIM, VictimSearch


class ReclaimWaits:
    """One cycle's answers to "when could this job reclaim?", for `Cycle` step 11."""

    def __init__(
        self,
        ledger: Ledger,
        search: VictimSearch,
        fair_share: Mapping[tuple[str, str], int],
        placement: PlacementStrategy,
    ) -> None:
        self.ledger = ledger
        self.search = search
        self.fair_share = fair_share
        self.placement = placement

    def reason(
        self, job: PendingJob, fl: FlavorLedger, limit_ok: Callable[[], bool], budget: int
    ) -> Reason | None:
        """WAITING_FOR_RECLAIM for `job` (within its guarantee, its victim search failed), or
        None when borrowers' minimum runtimes are not what keeps it waiting."""
        # 1.
        ends = self.search.protection_ends(job)
        if not ends:
            return None
        # 2.
        victims = self._victims_at(job, fl, limit_ok, budget, ends[-1])
        if victims is None:
            return None
        # 3. Invariant: a search at ends[hi] finds room (its victims), none before ends[lo + 1]
        #    is known to.
        lo, hi = -1, len(ends) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            found = self._victims_at(job, fl, limit_ok, budget, ends[mid])
            if found is None:
                lo = mid
            else:
                hi, victims = mid, found
        search = self.search
        protected = [v for v in victims if not search.horizon.passed(search.protected_until(v))]
        if not protected:
            return None  # room without waiting: the search failed for another cause
        teams = tuple(sorted({v.team for v in victims}))
        ledger = self.ledger
        borrowed = sum(
            max(ledger.in_use(team, job.flavor) - self.fair_share.get((team, job.flavor), 0), 0)
            for team in teams
        )
        longest = max(self.search.protected_until(v) - v.started_at for v in protected)
        return reasons.waiting_for_reclaim(job, fl.total_free, teams, borrowed, longest, ends[hi])

    def blocked(self, job: PendingJob) -> reasons.GuaranteeBlocked:
        """For `job` within its guarantee, reclaim having found no room and minimum runtimes
        not being the cause: what its team holds of its guarantee, what other teams hold
        beyond what a guarantee claim leaves them (min(guarantee, fair share)), and how much
        of that is in jobs reclaim may take (NO_CAPACITY's extras, reasons.py)."""
        search = self.search
        ledger = self.ledger
        flavor = job.flavor
        floor = search.guarantee_floor
        mine = search.chains.get(job.team, (job.team,))
        borrowed = takeable = 0
        for team in search.chains:
            if team in mine:
                continue
            extra = ledger.in_use(team, flavor) - floor.get((team, flavor), 0)
            if extra <= 0:
                continue
            borrowed += extra
            gives = 0
            for victim in search.index.of(team, flavor):
                if victim.id in ledger.victims or victim.gpus > extra:
                    continue
                # (One still protected changes the numbers when it leaves: a crossing.)
                if search.horizon.passed(search.protected_until(victim)):
                    gives += victim.gpus
                    if gives >= extra:
                        break  # all it may give: no later job changes the number
            takeable += min(gives, extra)
        guarantee = search.guarantees.get((job.team, flavor), 0)
        return reasons.GuaranteeBlocked(
            guarantee, ledger.in_use(job.team, flavor), borrowed, takeable
        )

    def _victims_at(
        self,
        job: PendingJob,
        fl: FlavorLedger,
        limit_ok: Callable[[], bool],
        budget: int,
        at: float,
    ) -> list[RunningJob] | None:
        """The reclaim victims a search at time `at` would take for `job`, or None (4.)."""
        ledger = self.ledger
        mark = ledger.checkpoint()
        try:
            found = self.search.find(job, fl, limit_ok, True, False, budget, at)
            if found is None:
                return None
            if (
                fit_gang(
                    fl,
                    job.workers,
                    job.gpus_per_worker,
                    self.placement,
                    fl.incoming,
                    job.cpu_per_worker,
                    job.memory_per_worker,
                    True,
                )
                is None
            ):
                return None
            return [victim for victim, kind in found if kind == RECLAIM]
        finally:
            ledger.rollback(mark)
