"""plan(): one admission cycle over a snapshot.

Phases (each a method below):
1. the ledger: every running job's GPUs counted on its nodes and against its team;
2. fair shares per team and flavor (fairshare.py);
3. the order: starving jobs, then teams furthest below their share, then inside each team by
   priority, user usage, submission (ordering.py);
4. each job in that order: admit it whole, let it backfill, wait for GPUs already coming back,
   preempt for it, reserve nodes for it, or leave it pending with a reason (`_consider`);
5. positions of the jobs left pending, in the order they were considered (given as each job
   is left pending).
"""

from __future__ import annotations

from itertools import groupby
from operator import attrgetter

from gpuqueue.scheduler import reasons
from gpuqueue.scheduler.fairshare import fair_shares
from gpuqueue.scheduler.holdings import Holdings, TeamTables
from gpuqueue.scheduler.ledger import FlavorLedger, Ledger
from gpuqueue.scheduler.model import (
    Admission,
    Pending,
    PendingJob,
    Placement,
    Plan,
    Policy,
    Preemption,
    Quota,
    Reason,
    ReasonCode,
    Snapshot,
)
from gpuqueue.scheduler.ordering import Order, QueueJobs
from gpuqueue.scheduler.placement import fit_gang
from gpuqueue.scheduler.preemption import PRIORITY, VictimIndex, VictimSearch
from gpuqueue.scheduler.starvation import Reserver
from gpuqueue.scheduler.usage import seconds_to_recover


def plan(
    snapshot: Snapshot,
    policy: Policy | None = None,
    *,
    explain: bool = True,
    holdings: Holdings | None = None,
) -> Plan:
    """Admit, preempt and explain: the same snapshot and policy always give the same plan.

    `explain=False` leaves `Plan.pending` empty, for callers that read only the decisions (the
    trace replay, the forecast): the admissions, preemptions, reservations and fair shares are
    the same, and the plan is cheaper by the reason and positions of every pending job.

    `holdings`: the snapshot's running jobs (in the snapshot's order), nodes and teams already
    counted by a caller that keeps them up to date between plans (the trace replay); the plan is
    the same, without counting every running job again.
    """
    if holdings is not None and (
        len(holdings.jobs) != len(snapshot.running)
        or holdings.nodes != snapshot.nodes
        or holdings.teams != snapshot.teams
    ):
        raise ValueError("the holdings are not the snapshot's running jobs, nodes and teams")
    return _Cycle(snapshot, policy or Policy(), explain, holdings).run()


def plan_holds_later(snapshot: Snapshot, result: Plan, later: float, policy: Policy) -> bool:
    """Whether `plan(replace(snapshot, now=later), policy)` is certain to equal `result`, the
    plan of `snapshot`: a caller whose snapshot changed only by the clock may keep `result`.

    The plan reads the clock in these places only, each checked here for the same answer at
    `snapshot.now` and at `later`:
    1. the order, rule 1: a pending job starves once `now - submitted_at >= starvation_seconds`;
    2. the victim search: a running job is out of its minimum runtime once
       `now >= min_runtime_until` (or `started_at + min_runtime_seconds`);
    3. the victim search, reclaim beyond a guarantee (hysteresis): a running job is taken only
       once `started_at <= now - reclaim_min_runtime_seconds`;
    4. the reservations (starvation.py): their expected start, the running jobs' expected ends
       clamped to now, the checkpoint grace of jobs being preempted, a backfill job's end.
       With every answer of 1-3 the same the plan takes the same steps, so the same jobs try
       to reserve; `result` must have no reservation. Then each of those tries failed for a
       reason the clock does not touch (no flavor, the reservation budget, or the gang not
       fitting even once every running job of the flavor has ended, which counts the same
       GPUs at any time), and fails again; no GPU is held, so backfill and "behind a
       reservation" never come up.
    5. the reason of a job held back by its share debt: its expected recovery is a time
       (`now` plus the wait); `result` must explain no such job.
    Nothing else reads the clock (fair shares, placement, ledger and the other rules do not),
    so every step, decision and reason of the later plan is the same.
    """
    now = snapshot.now
    if later == now:
        return True
    if result.reservations:
        return False
    if any(p.reason.code is ReasonCode.IN_SHARE_DEBT for p in result.pending):
        return False
    starving_after = policy.starvation_seconds
    for job in snapshot.pending:
        if (now - job.submitted_at >= starving_after) != (
            later - job.submitted_at >= starving_after
        ):
            return False
    settled_now = now - policy.reclaim_min_runtime_seconds
    settled_later = later - policy.reclaim_min_runtime_seconds
    min_runtime = policy.min_runtime_seconds
    for held in snapshot.running:
        until = held.min_runtime_until
        if until is None:
            until = held.started_at + min_runtime
        if (now >= until) != (later >= until):
            return False
        if (held.started_at > settled_now) != (held.started_at > settled_later):
            return False
    return True


class _Cycle:
    def __init__(
        self,
        snapshot: Snapshot,
        policy: Policy,
        explain: bool = True,
        holdings: Holdings | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.explain = explain
        self.now = snapshot.now
        # The teams' tables (chains, quotas, weights, guarantees) depend on the teams only: the
        # holdings keep them between plans.
        tables = TeamTables(snapshot.teams) if holdings is None else holdings.tables
        self.tables = tables
        self.chains: dict[str, tuple[str, ...]] = tables.chains
        self.quotas: dict[tuple[str, str], Quota] = tables.quotas
        # Time-based fair share needs the history (usage.py) and the policy's consent.
        self.balance = snapshot.share_balance if policy.time_based_share else None
        # Phase 1: the ledger (its per-team sums are the running part of the demand). Before
        # any job is counted, each flavor's free GPUs are its capacity (`capacity_by_flavor`).
        if holdings is None:
            self.ledger = Ledger(snapshot.nodes, self.chains)
            self.capacity = {name: fl.total_free for name, fl in self.ledger.flavors.items()}
            running = self.ledger.hold_running(snapshot.running)
            victims = VictimIndex(snapshot.running)
        else:
            self.capacity = holdings.capacity()
            self.ledger = holdings.ledger()
            running = holdings.running_totals()
            victims = holdings.victim_index()
        # Phase 2: fair shares. The pending jobs are grouped by queue (team and flavor) once,
        # for the pending part of the demand and for the order. (By runs of one queue, with
        # C-level passes: a snapshot lists each queue's jobs together as a rule.)
        grouped: dict[tuple[str, str], list[PendingJob]] = {}
        for key, run in groupby(snapshot.pending, _QUEUE):
            jobs = grouped.get(key)
            if jobs is None:
                grouped[key] = list(run)
            else:
                jobs.extend(run)
        # What the order reads of each queue: kept with the holdings, for the queues whose
        # jobs are the last plan's (most of them).
        if holdings is None:
            self.queues = {key: QueueJobs(jobs) for key, jobs in grouped.items()}
        else:
            memo = holdings.queues
            self.queues = {key: memo.get(key, jobs) for key, jobs in grouped.items()}
        asked = {key: queue.gpus for key, queue in self.queues.items()}
        self.fair_share = fair_shares(snapshot, self.capacity, running, asked, tables.shares)
        self.search = VictimSearch(
            self.ledger,
            victims,
            self.fair_share,
            self.chains,
            policy,
            self.now,
            tables.guarantees,
            self.balance,
        )
        self.reserver = Reserver(
            self.ledger,
            snapshot.nodes,
            snapshot.running,
            policy,
            self.now,
            None if holdings is None else holdings.release_events(),
        )
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.pending: list[Pending] = []
        self.searches_left = policy.max_victim_searches_per_cycle
        # (team, flavor, gpus per worker, priority) -> fewest workers a victim search failed for:
        # nothing frees GPUs during a cycle, so a bigger gang of the same kind fails too.
        self.failed_search: dict[tuple[str, str, int, int, bool], int] = {}
        self.waiting_in_team: dict[tuple[str, str], int] = {}
        self._in_team: dict[str, int] = {}  # jobs left pending so far, per team (positions)
        self.order: Order | None = None
        self.starving: set[int] = set()  # ids of the starving jobs
        self.owed: set[int] = set()  # of them, the first jobs of owed teams (ordering.py)
        self._behind: dict[str, tuple[int, Reason]] = {}
        self._blocked: dict[tuple[str, int, int, float | None], tuple[int, Reason]] = {}
        self._group_cache = tables.groups
        # Kinds of job that fell through to step 11 of `_consider`: the ledger stamp they did
        # so at, and the numbers of their reason (workers that fit, free GPUs).
        self._waits: dict[WaitKind, tuple[int, int, int]] = {}

    def run(self) -> Plan:
        # Phase 3: the order.
        self.order = Order(
            self.snapshot,
            self.ledger,
            self.fair_share,
            self.tables.weights,
            self.policy.starvation_seconds,
            self.policy.min_one_job,
            self.queues,
            self.balance,
            self.policy.share_slice_seconds,
            streaks=not self.explain,  # only skipped without explanations
        )
        self.starving = {job.id for job in self.order.starving}
        self.owed = self.order.owed
        # Phase 4: each job. The shortcut of `_consider` (a kind of job that waits) is inlined
        # here: it is taken for most jobs of a busy cycle.
        # Phase 5: a job left pending gets its positions at once: the jobs are considered in
        # the order that the positions count.
        waits = self._waits
        ledger = self.ledger
        waiting = self.waiting_in_team
        explain = self.explain
        for job in self.order.starving:
            why = self._consider(job)
            if why is not None and explain:
                self._left_pending(job, why)
        for run, streaks in self.order.runs():
            while run:
                stamp = ledger.stamp
                job = run.pop()
                # _wait_kind(job), made with the job: this line runs for every pending job.
                hit = waits.get(job.kind)
                if hit is not None and hit[0] == stamp:
                    if explain:  # the count of jobs waiting ahead only feeds the reason
                        key = (job.team, job.flavor)
                        ahead = waiting.get(key, 0)
                        waiting[key] = ahead + 1
                        self._left_pending(job, reasons.no_capacity(job, hit[1], hit[2], ahead))
                    elif streaks is not None:
                        # The jobs next in the run of the same kind wait too, changing nothing
                        # and leaving no trace without explanations: all at once.
                        left = len(run)  # the job's place in the run
                        del run[left + 1 - streaks[left] :]
                    continue
                why = self._consider(job)
                if why is not None and explain:
                    self._left_pending(job, why)
                if ledger.stamp != stamp:
                    break  # the order may have moved: the next run (Order.runs)
        return Plan(
            admissions=tuple(self.admissions),
            preemptions=tuple(self.preemptions),
            pending=tuple(self.pending),
            reservations=tuple(self.reserver.reservations),
            fair_shares=dict(sorted(self.fair_share.items())),
        )

    def _left_pending(self, job: PendingJob, reason: Reason) -> None:
        """Phase 5: the job's reason and positions, in its team and in the cluster."""
        in_team = self._in_team[job.team] = self._in_team.get(job.team, 0) + 1
        self.pending.append(Pending(job.id, reason, in_team, len(self.pending) + 1))

    # --- one job --------------------------------------------------------------------------------

    def _consider(self, job: PendingJob) -> Reason | None:
        """Decide one job; return why it stays pending, or None when it was admitted.

        1. A gang that no node or no flavor could ever hold is refused for good.
        2. The team (and its department) needs a quota for the flavor.
        3. Non-preemptible work may only use the guarantee: it can never be taken back.
        4. The limit (GPUs on their way back do not count); a higher-priority job over the limit
           may still preempt its own team's lower-priority work.
        5. Free GPUs: admit (borrowed when it takes the team past its fair share).
        6. Backfill: GPUs held by a reservation that starts after this job's max runtime ends.
        7. GPUs held by a reservation block the job when they are all that is missing.
        8. GPUs of jobs already being preempted: claim them and wait, preempting no more.
        9. Preempt: reclaim borrowed GPUs from other teams, or lower priority work of its own.
        10. Starving: reserve the nodes where it fits soonest.
        11. Otherwise it waits for capacity, possibly behind earlier jobs of its team.

        Steps 1-10 read only the job's kind (`_wait_kind`), the ledger, the cycle's search
        budget and its reservations; the ledger's stamp changes with any of them. When a job
        of the same kind fell through to step 11 at the same stamp, this one does too, and
        goes straight there: most jobs of a busy cycle wait, and the same few kinds repeat
        down each team's queue. Without explanations a job held back by its team's share debt
        (step 4b, which reads no more than steps 1-4) is remembered the same way: its reason
        is read by nobody.
        """
        if job.id in self.starving:
            return self._decide(job)
        kind = job.kind
        stamp = self.ledger.stamp
        hit = self._waits.get(kind)
        if hit is not None and hit[0] == stamp:
            return self._no_capacity(job)
        reason = self._decide(job)
        if (
            reason is not None
            and (reason.code in _WAITS or (reason is _IN_SHARE_DEBT and not self.explain))
            and self.ledger.stamp == stamp
        ):
            if self.explain:
                fl = self.ledger.flavors[job.flavor]
                free = fl.total_free
                self._waits[kind] = (stamp, fl.fit_count(job.gpus_per_worker, "", None), free)
            else:
                self._waits[kind] = (stamp, 0, 0)  # the numbers only feed reasons
        return reason

    def _no_capacity(self, job: PendingJob) -> Reason:
        """Step 11 of `_consider`. Without explanations every job that waits gets one shared
        reason with no numbers (nobody reads it: `Plan.pending` stays empty)."""
        if not self.explain:
            return _NO_CAPACITY
        fl = self.ledger.flavors[job.flavor]
        key = (job.team, job.flavor)
        ahead = self.waiting_in_team.get(key, 0)
        self.waiting_in_team[key] = ahead + 1
        return reasons.no_capacity(
            job, fl.fit_count(job.gpus_per_worker, "", None), fl.total_free, ahead
        )

    def _decide(self, job: PendingJob) -> Reason | None:
        """Steps 1-11 of `_consider`."""
        ledger = self.ledger
        flavor = job.flavor
        fl = ledger.flavors.get(flavor)
        g = job.gpus_per_worker
        gpus = job.workers * g
        # 1.
        if (
            fl is None
            or gpus <= 0  # a malformed gang (no workers or no GPUs) can never be placed either
            or fl.max_node < g
            or fl.total_capacity < gpus
        ):
            if fl is None:
                return reasons.never_fits(job, 0, 0)
            return reasons.never_fits(job, fl.max_node, fl.total_capacity)
        groups = self._groups(job.team, flavor)
        # 2.
        for group, quota in groups:
            if quota is None:
                return reasons.no_quota(job, _scope(job, group))
        # 3.
        if not job.preemptible:
            for group, quota in groups:
                assert quota is not None
                used = ledger.nonpreemptible.get((group, flavor), 0)
                if used + gpus > quota.guarantee:
                    return reasons.over_fair_share(job, _scope(job, group), quota.guarantee, used)
        # 4.
        for group, quota in groups:
            assert quota is not None
            in_use = ledger.in_use(group, flavor)
            if in_use + gpus > quota.limit:
                waiting = self._preempt(job, fl, reclaim=False)
                if waiting is not None:
                    return waiting
                return reasons.over_limit(job, _scope(job, group), quota.limit, in_use)
        # 4b. Time-based fair share: a team that owes GPU-time borrows no more (`_in_debt`).
        if self.balance is not None and self._in_debt(job):
            return self._in_debt_reason(job) if self.explain else _IN_SHARE_DEBT
        workers = job.workers
        # Steps 5-7 depend only on the flavor's ledger (its version), the gang's shape and the
        # job's max runtime (backfill): the tens of thousands of jobs queued behind the same
        # reservations get one answer, remembered until the ledger changes.
        shape = (flavor, workers, g, job.max_runtime)
        blocked = self._blocked.get(shape)
        if blocked is not None and blocked[0] == fl.version:
            return blocked[1]
        # 5. (Counting first is cheap and cached; placement only runs when it will succeed.)
        strategy = self.policy.placement
        if fl.total_free >= gpus and fl.fit_count(g, "", None) >= workers:
            placement = fit_gang(fl, workers, g, strategy)
            if placement is not None:
                self._admit(job, placement)
                return None
        if fl.held:
            # 6.
            kind, room = self.reserver.backfill_room(job)
            if room and fl.fit_count(g, kind, room) >= workers:
                placement = fit_gang(fl, workers, g, strategy, room)
                if placement is not None:
                    self._admit(job, placement, use_held=room)
                    return None
            # 7. Naming every reservation of the flavor is enough for the reason; finding the
            #    exact nodes would cost a placement per blocked job.
            if fl.fit_count(g, "held", fl.held) >= workers:
                # The reason is the same for every job of the flavor until the ledger changes,
                # and tens of thousands of jobs may be behind the same reservations.
                hit = self._behind.get(flavor)
                if hit is None or hit[0] != fl.version:
                    holders = self.reserver.holders(flavor)
                    start = min((r.expected_start for r in holders), default=self.now)
                    why = reasons.behind_reservation(job, start, tuple(r.job_id for r in holders))
                    hit = self._behind[flavor] = (fl.version, why)
                self._blocked[shape] = hit
                return hit[1]
        # 8.
        if fl.incoming and fl.fit_count(g, "incoming", fl.incoming) >= workers:
            placement = fit_gang(fl, workers, g, strategy, fl.incoming)
            if placement is not None:
                waited = self._incoming_jobs(job.flavor, placement)
                ledger.admit(job.team, job.user, job.flavor, g, job.preemptible, placement, True)
                return reasons.waiting_for_preemption(job, waited)
        # 9. (The budget is checked here first: most jobs of a busy cycle get this far.)
        policy = self.policy
        if (
            (policy.preemption or policy.reclaim)
            and self.searches_left > 0
            and len(self.preemptions) < policy.max_preemptions_per_cycle
        ):
            # The first job of a team that is owed GPU-time may reclaim beyond its share.
            reclaim = policy.reclaim and (self.search.may_reclaim(job) or job.id in self.owed)
            waiting = self._preempt(job, fl, reclaim=reclaim)
            if waiting is not None:
                return waiting
        # 10.
        if job.id in self.starving:
            reservation = self.reserver.reserve(job)
            if reservation is not None:
                return reasons.reserved(job, reservation.expected_start, len(reservation.placement))
        # 11.
        return self._no_capacity(job)

    def _in_debt(self, job: PendingJob) -> bool:
        """Whether admitting `job` would take its team past its fair share while the team
        holds Policy.share_borrow_debt_seconds x max(fair share, the job's GPUs) more than it
        was entitled to (usage.py): borrowing then waits until the balance recovers."""
        assert self.balance is not None
        key = (job.team, job.flavor)
        debt = -self.balance.get(key, 0.0)
        if debt <= 0:  # most teams, and the cheapest test (the threshold is never negative)
            return False
        share = self.fair_share.get(key, 0)
        if self.ledger.in_use(job.team, job.flavor) + job.gpus <= share:
            return False
        return debt > self.policy.share_borrow_debt_seconds * max(share, job.gpus)

    def _in_debt_reason(self, job: PendingJob) -> Reason:
        """The numbers of `_in_debt`, and when the debt should be back under the threshold."""
        assert self.balance is not None
        key = (job.team, job.flavor)
        share = self.fair_share.get(key, 0)
        debt = -self.balance.get(key, 0.0)
        threshold = self.policy.share_borrow_debt_seconds * max(share, job.gpus)
        wait = seconds_to_recover(debt, threshold, self.policy.share_half_life_seconds)
        return reasons.in_share_debt(
            job, share, self.ledger.in_use(job.team, job.flavor), debt, threshold, self.now + wait
        )

    def _groups(self, team: str, flavor: str) -> list[tuple[str, Quota | None]]:
        """The team and its department with their quotas for a flavor (None: no quota)."""
        key = (team, flavor)
        groups = self._group_cache.get(key)
        if groups is None:
            chain = self.chains.get(team, (team,))
            groups = [(group, self.quotas.get((group, flavor))) for group in chain]
            self._group_cache[key] = groups
        return groups

    def _admit(
        self, job: PendingJob, placement: Placement, use_held: dict[str, int] | None = None
    ) -> None:
        fair_share = self.fair_share.get((job.team, job.flavor), 0)
        borrowed = (
            job.preemptible and self.ledger.in_use(job.team, job.flavor) + job.gpus > fair_share
        )
        self.ledger.admit(
            job.team,
            job.user,
            job.flavor,
            job.gpus_per_worker,
            job.preemptible,
            placement,
            use_held=use_held,
        )
        self.admissions.append(Admission(job.id, placement, borrowed))

    def _incoming_jobs(self, flavor: str, placement: Placement) -> tuple[int, ...]:
        ids: list[int] = []
        for node, _ in placement:
            ids.extend(self.ledger.incoming_jobs.get((flavor, node), ()))
        return tuple(sorted(set(ids)))

    def _preempt(self, job: PendingJob, fl: FlavorLedger, reclaim: bool) -> Reason | None:
        """Try to free room for `job` by preemption; on success the job has claimed its GPUs
        and the reason it now carries (waiting for its victims) is returned.
        """
        policy = self.policy
        priority = policy.preemption
        reclaim = reclaim and policy.reclaim
        budget = policy.max_preemptions_per_cycle - len(self.preemptions)
        if not (priority or reclaim) or budget <= 0 or self.searches_left <= 0:
            return None
        priority = priority and self.search.has_lower(job)
        if not (priority or reclaim):
            return None
        key = (job.team, job.flavor, job.gpus_per_worker, job.priority, reclaim)
        if self.failed_search.get(key, job.workers + 1) <= job.workers:
            return None
        self.searches_left -= 1
        self.ledger.stamp += 1  # the budget is part of the state `_consider` remembers
        ledger = self.ledger
        chain = self.chains.get(job.team, (job.team,))
        g = job.gpus_per_worker

        def limit_ok() -> bool:
            return all(
                ledger.in_use(group, job.flavor) + job.gpus
                <= self.quotas[(group, job.flavor)].limit
                for group in chain
            )

        mark = ledger.checkpoint()
        victims = self.search.find(job, fl, limit_ok, reclaim, priority, budget)
        placement = None
        if victims is not None:
            placement = fit_gang(fl, job.workers, g, policy.placement, fl.incoming)
        if victims is None or placement is None:
            ledger.rollback(mark)
            if job.workers < self.failed_search.get(key, job.workers + 1):
                self.failed_search[key] = job.workers
            return None
        waited = set(self._incoming_jobs(job.flavor, placement))
        ledger.admit(job.team, job.user, job.flavor, g, job.preemptible, placement, True)
        ledger.commit(mark)
        touched: set[tuple[str, str]] = set()
        for victim, kind in victims:
            self.preemptions.append(Preemption(victim.id, job.id, kind))
            waited.add(victim.id)
            for node, _ in victim.placement:
                ledger.incoming_jobs.setdefault((victim.flavor, node), []).append(victim.id)
            if kind != PRIORITY:
                touched.add((victim.team, victim.flavor))
        assert self.order is not None
        for team, flavor in sorted(touched):
            self.order.touch(team, flavor)
        return reasons.waiting_for_preemption(job, tuple(waited))


WaitKind = tuple[str, str, int, int, int, bool, float | None]
_QUEUE = attrgetter("team", "flavor")
_WAITS = (ReasonCode.NO_CAPACITY, ReasonCode.QUEUED_BEHIND_TEAM)
_NO_CAPACITY = Reason(ReasonCode.NO_CAPACITY)
_IN_SHARE_DEBT = Reason(ReasonCode.IN_SHARE_DEBT)  # without explanations: no numbers either


def _wait_kind(job: PendingJob) -> WaitKind:
    """What steps 1-10 of `_consider` read of a job (its id only for starvation)."""
    return (
        job.team,
        job.flavor,
        job.workers,
        job.gpus_per_worker,
        job.priority,
        job.preemptible,
        job.max_runtime,
    )


def _scope(job: PendingJob, group: str) -> str:
    return "team" if group == job.team else "department"
