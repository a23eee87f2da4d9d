"""plan(): one admission cycle over a snapshot.

Phases (each a method below):
1. the ledger: every running job's GPUs counted on its nodes and against its team;
2. fair shares per team and flavor (fairshare.py);
3. the order: starving jobs, then teams furthest below their share, then inside each team by
   priority, user usage, submission (ordering.py);
4. each job in that order: admit it whole, let it backfill, wait for GPUs already coming back,
   preempt for it, reserve nodes for it, or leave it pending with a reason (`_consider`);
5. positions of the jobs left pending, in the order they were considered (given as each job
   is left pending);
6. preemptions to withdraw: jobs being preempted for a job whose GPUs no job claimed
   (`_withdrawals`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable
from itertools import groupby
from operator import attrgetter

from gpuqueue.scheduler import reasons
from gpuqueue.scheduler.fairshare import fair_shares
from gpuqueue.scheduler.held_before import HeldBefore
from gpuqueue.scheduler.horizon import Horizon
from gpuqueue.scheduler.ledger import FlavorLedger, Ledger
from gpuqueue.scheduler.model import (
    Admission,
    Pending,
    PendingJob,
    Placement,
    PlacementStrategy,
    Plan,
    PodAsk,
    Policy,
    Preemption,
    Quota,
    Reason,
    ReasonCode,
    RunningJob,
    Snapshot,
    by_ask,
    group_chains,
    group_quotas,
    node_asks,
    pod_nodes,
)
from gpuqueue.scheduler.never import NeverAdmits
from gpuqueue.scheduler.ordering import Order, QueueJobs
from gpuqueue.scheduler.placement import fit_gang, fit_on, pods_fit
from gpuqueue.scheduler.preemption import (
    PRIORITY,
    RECLAIM,
    VictimIndex,
    VictimSearch,
    victim_key,
)
from gpuqueue.scheduler.reclaim_wait import ReclaimWaits
from gpuqueue.scheduler.shared_gpus import FULL, ceil_gpus
from gpuqueue.scheduler.special import Special
from gpuqueue.scheduler.starvation import Reserver, backfill_runtime
from gpuqueue.scheduler.topology import Topology
from gpuqueue.scheduler.usage import seconds_to_recover

BINPACK = PlacementStrategy.BINPACK
# A pending job's queue (team, flavor): a plan groups the snapshot's jobs by runs of one queue.
QUEUE_KEY = attrgetter("team", "flavor")


def plan(snapshot: Snapshot, policy: Policy | None = None, *, explain: bool = True) -> Plan:
    """Admit, preempt and explain: the same snapshot and policy always give the same plan.

    `explain=False` (a forecast's step): the same admissions, preemptions and reservations, but
    no reasons or positions for the jobs left pending (`Plan.pending` is empty), and the jobs
    are considered only until none of the rest could be admitted or preempt for; the plan then
    promises no `stable_until`.
    """
    return Cycle(snapshot, policy or Policy(), explain=explain).run()


class Cycle:
    """One plan: the ledger, the order and every decision made so far.

    A few answers are kept while what they derive from holds, each by the structure that owns
    that data: the verdict for a kind of job here (`_consider`), the workers that fit in the
    flavor's ledger (`FlavorLedger.fits`), the backfill room and the reason of a job behind
    reservations in the reserver. `memo=False` turns all of them off: the same plan, every
    answer computed afresh (tests/scheduler/test_memo.py compares the two).
    """

    def __init__(
        self, snapshot: Snapshot, policy: Policy, memo: bool = True, explain: bool = True
    ) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.memo = memo
        self.explain = explain
        self.horizon = Horizon(snapshot.now)  # the clock: every reading of the time goes through it
        self.chains = group_chains(snapshot.teams)
        self.quotas = group_quotas(snapshot.teams)
        # Time-based fair share needs the history (usage.py) and the policy's consent.
        self.balance = snapshot.share_balance if policy.time_based_share else None
        # Phase 1: the ledger (its per-team sums are the running part of the demand). Before
        # any job is counted, each flavor's free GPUs are its capacity (`capacity_by_flavor`).
        self.ledger = Ledger(snapshot.nodes, self.chains, memo)
        # Whether no state admits a job (never.py), from the ledger's sizes and the quotas.
        self.never = NeverAdmits(self.ledger.flavors, self.quotas, self.chains)
        capacity = {name: fl.total_free for name, fl in self.ledger.flavors.items()}
        # Nodes with GPUs of terminating pods (`Node.draining`): a few, when any.
        draining_nodes = [n for n in snapshot.nodes if n.draining and n.schedulable]
        for node in draining_nodes:  # those GPUs come back: capacity too
            for draining in node.draining:
                if draining.flavor in capacity and draining.flavor in node.capacity:
                    capacity[draining.flavor] += draining.gpus
        # Fractional jobs of shared flavors hold thousandths of GPUs (shared_gpus.py): they are
        # counted apart, and are never victims, reservations' waits or promised GPUs. One on a
        # flavor that is not shared, or with no devices, counts as whole GPUs (never fewer).
        whole_running = snapshot.running
        fractional: list[RunningJob] = []
        if snapshot.shared_flavors:
            self.ledger.share(snapshot.shared_flavors)
            self.ledger.bind_teams(snapshot.team_gpu_flavors)
            flavors = self.ledger.flavors
            whole_list: list[RunningJob] = []
            for job in snapshot.running:
                fl = flavors.get(job.flavor) if job.gpu_milli and job.devices else None
                if fl is not None and fl.shared is not None:
                    fractional.append(job)
                else:
                    whole_list.append(job)
            if fractional:
                whole_running = tuple(whole_list)
        # Jobs being preempted for a job that is pending: a few, when any.
        preempted = [
            job
            for job in whole_running
            if job.preempted_for is not None and job.preempting_since is not None
        ]
        pending_ids = {job.id for job in snapshot.pending} if draining_nodes or preempted else set()
        preempted = [job for job in preempted if job.preempted_for in pending_ids]
        running = self.ledger.hold_running(whole_running, {job.id for job in preempted})
        if fractional:
            for key, gpus in self.ledger.hold_shared(fractional).items():
                running[key] = running.get(key, 0) + gpus
        self.special = Special(snapshot, self.ledger, policy.placement, policy.workload)
        self.topology = Topology(snapshot.nodes, snapshot.topologies, memo)
        # (team, flavor) -> the team and its department with their quotas (None: no quota).
        self.groups = {
            (team, flavor): [(group, self.quotas.get((group, flavor))) for group in chain]
            for team, chain in self.chains.items()
            for flavor in self.ledger.flavors
        }
        # Phase 2: fair shares. The pending jobs are grouped by queue (team and flavor) once,
        # for the pending part of the demand and for the order. (By runs of one queue, with
        # C-level passes: a snapshot lists each queue's jobs together as a rule.)
        grouped: dict[tuple[str, str], list[PendingJob]] = {}
        for key, run in groupby(snapshot.pending, QUEUE_KEY):
            jobs = grouped.get(key)
            if jobs is None:
                grouped[key] = list(run)
            else:
                jobs.extend(run)
        self.queues = {key: QueueJobs(jobs) for key, jobs in grouped.items()}
        asked = {key: queue.gpus for key, queue in self.queues.items()}
        self.fair_share = fair_shares(snapshot, capacity, running, asked)
        self.guarantees = {key: quota.guarantee for key, quota in self.quotas.items()}
        self.search = VictimSearch(
            self.ledger,
            VictimIndex(whole_running),
            self.fair_share,
            self.chains,
            policy,
            self.horizon,
            self.guarantees,
            self.balance,
        )
        self.reclaim_waits = ReclaimWaits(
            self.ledger, self.search, self.fair_share, policy.placement
        )
        self.reserver = Reserver(
            self.ledger, snapshot.nodes, whole_running, policy, self.horizon, memo, self.topology
        )
        self.held_before = HeldBefore(whole_running)  # for reasons (`_beyond_share`)
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.pending: list[Pending] = []
        self.searches_left = policy.max_victim_searches_per_cycle
        # (team, flavor, gpus per worker, priority, reclaim, topology level, one domain only,
        # pods' asks) -> fewest workers a victim search failed for. Nothing frees GPUs during a
        # cycle, so a bigger gang of the same kind would fail too: it is not searched for, and
        # spends none of the search budget.
        self.failed_search: dict[
            tuple[str, str, int, int, bool, str, bool, tuple[PodAsk, ...]], int
        ] = {}
        self.waiting_in_team: dict[tuple[str, str], int] = {}
        self._in_team: dict[str, int] = {}  # jobs left pending so far, per team (positions)
        self.order: Order | None = None
        self.starving: set[int] = set()  # ids of the starving jobs
        self.owed: set[int] = set()  # of them, the first jobs of owed teams (ordering.py)
        # The verdicts of `_consider` by kind of job, with the state they were reached in.
        self._verdicts: dict[Hashable, Verdict] = {}
        self._within_guarantee: dict[str, list[tuple[str, int, int]]] = {}
        self._holding_out: dict[int, bool] = {}  # `_holds_out` per job: asked at every step
        self._draining: dict[int, tuple[int, str | None]] | None = None  # `_draining_jobs`
        # GPUs of jobs being preempted (while they save a checkpoint) and of terminating pods
        # (`Node.draining`, once requeued): incoming at once, or, when they were taken for a
        # job that is pending, promised to it: hidden from every other job until that job is
        # decided (`_decide`). A preemptor waits for what its preemption frees instead of
        # preempting a second victim, and no job before it in the order takes them; a job
        # before it may still preempt others by the usual rules (a job being preempted is no
        # candidate again, and a preemptor holds nothing to preempt).
        self.promised: dict[int, list[tuple[str, str, int, int]]] = {}
        for job in preempted:
            assert job.preempted_for is not None
            promise = self.promised.setdefault(job.preempted_for, [])
            for node_name, workers in job.placement:
                promise.append((job.flavor, node_name, workers * job.gpus_per_worker, job.id))
        for node in draining_nodes:
            for draining in node.draining:
                if draining.for_job_id in pending_ids:
                    self.promised.setdefault(draining.for_job_id, []).append(
                        (draining.flavor, node.name, draining.gpus, draining.job_id)
                    )
                else:
                    self.ledger.come_back(
                        draining.flavor, node.name, draining.gpus, draining.job_id
                    )

    def run(self) -> Plan:
        # Phase 3: the order.
        self.order = Order(
            self.snapshot,
            self.ledger,
            self.fair_share,
            {key: quota.weight for key, quota in self.quotas.items()},
            self.policy.starvation_seconds,
            self.policy.min_one_job,
            self.queues,
            self.balance,
            self.policy.share_slice_seconds,
            self.horizon,
            self.never,
            self.guarantees,
            self.policy.hold_for_older,
        )
        # Rule 1b (ordering.py): the jobs with their team's turn, while they are pending.
        self.turns = self.order.turns if self.policy.hold_for_older else {}
        self.starving = {job.id for job in self.order.starving}
        self.owed = self.order.owed
        # Phase 4: each job. Phase 5: a job left pending gets its positions at once: the jobs
        # are considered in the order that the positions count.
        ledger = self.ledger
        for job in self.order.starving:
            why = self._decide(job)
            if self.turns:
                self._turn_taken(job, why)
            if why is not None:
                self._left_pending(job, why)
        consider = self._consider
        left_pending = self._left_pending
        settled = None if self.explain else Settled(self)
        for run in self.order.runs():
            while run:
                if settled is not None and settled.stops(run):
                    break
                stamp = ledger.stamp
                job = run.pop()
                why = consider(job)
                if why is not None:
                    left_pending(job, why)
                if ledger.stamp != stamp:
                    break  # the order may have moved: the next run (Order.runs)
            if settled is not None and settled.done:
                break
        # Phase 6 (only a plan that explains is applied to the cluster).
        withdrawals = self._withdrawals() if settled is None else ()
        return Plan(
            admissions=tuple(self.admissions),
            preemptions=tuple(self.preemptions),
            pending=tuple(self.pending),
            reservations=tuple(self.reserver.reservations),
            withdrawals=withdrawals,
            fair_shares=dict(sorted(self.fair_share.items())),
            stable_until=self.horizon.stable_until if settled is None else -math.inf,
            balance_checks=self.horizon.balance_checks,
        )

    def _withdrawals(self) -> tuple[int, ...]:
        """Phase 6: jobs being preempted for a job whose GPUs, every job having been decided,
        are all still incoming (no job claimed them, nor counted them in a victim search),
        before their checkpoint deadline: nobody needs them to stop. Of two victims on a node
        where a claim covers one, the more valuable is withdrawn (the reverse of the victims'
        order, preemption.py). A job preempted for no job (a drain) is never withdrawn.
        """
        ledger = self.ledger
        withdrawn: list[int] = []
        candidates = [
            job
            for job in ledger.leaving_jobs.values()
            if job.preempted_for is not None and job.preempting_since is not None
        ]
        for job in sorted(candidates, key=victim_key, reverse=True):
            assert job.preempting_since is not None
            grace = job.checkpoint_grace
            if grace is not None and self.horizon.passed(job.preempting_since + grace):
                continue  # being stopped: its work is saved or lost already
            fl = ledger.flavors.get(job.flavor)
            if fl is None or not job.placement:
                continue
            g = job.gpus_per_worker
            if all(fl.incoming.get(node, 0) >= workers * g for node, workers in job.placement):
                for node, workers in job.placement:
                    fl.set_incoming(node, fl.incoming[node] - workers * g)
                withdrawn.append(job.id)
        return tuple(sorted(withdrawn))

    def _left_pending(self, job: PendingJob, reason: Reason) -> None:
        """Phase 5: the job's reason and positions, in its team and in the cluster."""
        if not self.explain:
            return
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
        6. Backfill: GPUs held by a reservation that starts after this job's max runtime ends
           (without one: a margin on its predicted runtime, starvation.backfill_runtime).
        7. GPUs held by a reservation block the job when they are all that is missing.
        8. GPUs of jobs already being preempted: claim them and wait, preempting no more.
        9. Preempt: reclaim borrowed GPUs from other teams, or lower priority work of its own.
        10. Starving: reserve the nodes where it fits soonest.
        11. Otherwise it waits: within its guarantee, for borrowers to leave their minimum
            runtime when that is what stops reclaim (reclaim_wait.py); else for capacity,
            possibly behind earlier jobs of its team.

        Starving jobs are decided first, each on its own (`_decide`): they may reserve. The
        steps read no more of any other job than its kind (`PendingJob.kind`), and besides
        the job only the cycle's state (`_state`). So a verdict that changed nothing is kept
        for the kind and given to the next job of that kind while the state holds: most jobs
        of a busy cycle wait, and the same few kinds repeat down each team's queue. A job
        that waits for capacity still gets its own reason (its place behind its team's jobs).
        """
        if self.turns:
            turn = self.turns.get((job.team, job.flavor))
            # The job with its team's turn, or a newer one it may hold (step 4c): what they
            # read besides their kind, their age.
            if turn is not None and (turn is job or self._held_for(job, turn)):
                why = self._decide(job)
                self._turn_taken(job, why)
                return why
        if not self.memo or job.id in self.promised or job.shared:
            return self._decide(job)
        state = self._state()
        key = self._kind(job)
        hit = self._verdicts.get(key)
        if hit is not None and hit[0] == state:
            if hit[1] is not None:
                return hit[1]
            return self._waits_for_capacity(job, hit[2], hit[3])
        reason = self._decide(job)
        if reason is not None and self._state() == state:
            verdict: Verdict
            if reason.code in _WAITS:
                fl = self.ledger.flavors[job.flavor]
                fit = fl.fits(job.gpus_per_worker, "", job.cpu_per_worker, job.memory_per_worker)
                verdict = (state, None, fit, fl.total_free)
            else:
                verdict = (state, reason, 0, 0)
            self._verdicts[key] = verdict
        return reason

    def _turn_taken(self, job: PendingJob, why: Reason | None) -> None:
        """Once the job with its team's turn is admitted or has claimed its GPUs (it now
        counts in its team's use), the team's newer jobs are held for it no more."""
        key = (job.team, job.flavor)
        if self.turns.get(key) is job and (
            why is None or why.code == ReasonCode.WAITING_FOR_PREEMPTION
        ):
            del self.turns[key]

    def _held_for(self, job: PendingJob, turn: PendingJob) -> bool:
        """Whether `job` is newer than `turn`, of no higher priority, and would leave it no room
        under their team's limit (step 4c, before a backfill)."""
        if job is turn or job.priority > turn.priority:
            return False
        if (job.submitted_at, job.id) < (turn.submitted_at, turn.id):
            return False
        quota = self.quotas.get((job.team, job.flavor))
        if quota is None:
            return False
        return self.ledger.in_use(job.team, job.flavor) + job.gpus + turn.gpus > quota.limit

    def _newer_gpus(self, team: str, flavor: str, since: float) -> int:
        """GPUs the team holds of the flavor in jobs started after `since`."""
        in_use = self.ledger.in_use(team, flavor)
        return max(in_use - self.held_before.gpus(team, flavor, since), 0)

    def _kind(self, job: PendingJob) -> Hashable:
        """What the verdict of `job` is kept by: its kind, and for a gang preferring a level
        whether it still holds out for one domain (`_holds_out`), and for a job that may
        backfill by its predicted runtime the held GPUs it may borrow (step 6), which its kind
        does not say."""
        kind: Hashable = job.kind
        if job.topology_level and not job.topology_required:
            held = self._holding_out.get(job.id)
            kind = (kind, self._holds_out(job) if held is None else held)
        predicted = job.max_runtime is None and job.expected_runtime is not None
        if predicted and self.reserver.reservations:
            fl = self.ledger.flavors.get(job.flavor)
            if fl is not None and fl.held:
                kind = (kind, tuple(self.reserver.backfill_room(job)))
        return kind

    def _holds_out(self, job: PendingJob) -> bool:
        """A gang preferring a level that one domain of the level could hold waits for one,
        as if it required the level (neither the time nor a domain's capacity moves within a
        plan):
        a. within Policy.topology_patience_seconds of its submission or last requeue;
        b. past it, while it is starving: a domain is freed for it on purpose (step 10
           reserves the domain expected to free soonest, and only jobs that end before it
           backfill there; step 9 takes victims inside one domain). It takes the next level
           out, or any nodes, only when no such reservation can be made (step 10): every
           reservation taken, no known end frees a domain, or it could start now on several
           domains and no domain is expected to hold it within `_split_bound` (the
           bound, or less for a gang whose runtime is short: what the split would cost it).
           Splitting at once breaks the racks that the gangs after it need; waiting on
           without bound for a domain makes the longest waits longer (the replay on racks,
           docs/benchmarks.md).
        A gang past its patience that is not starving (it borrows beyond its team's share)
        takes what fits: it holds nothing back for itself and may be reclaimed."""
        held = self._holding_out.get(job.id)
        if held is None:
            patience = self.policy.topology_patience_seconds
            fl = self.ledger.flavors.get(job.flavor)
            since = job.submitted_at if job.requeued_at is None else job.requeued_at
            held = (
                patience > 0
                and (not self.horizon.passed(since + patience) or job.id in self.starving)
                and fl is not None
                and self.topology.level_of(job) >= 0
                and self.topology.largest(fl, job) >= job.workers
            )
            self._holding_out[job.id] = held
        return held

    def _split_bound(self, job: PendingJob) -> float:
        """How long a gang past its patience that could start now across domains waits for one
        (step 10): Policy.topology_reserve_seconds, and no longer than what the split would
        cost it, Policy.topology_split_cost times its max runtime, else its predicted one."""
        bound = self.policy.topology_reserve_seconds
        cost = self.policy.topology_split_cost
        runtime = job.max_runtime
        if runtime is None and job.runtime_predicted:
            runtime = job.expected_runtime
        if cost > 0 and runtime is not None:
            bound = min(bound, cost * runtime)
        return bound

    def _past_patience(self, job: PendingJob) -> bool:
        """Whether a gang preferring a level has waited out its patience (`_holds_out`)."""
        since = job.submitted_at if job.requeued_at is None else job.requeued_at
        return self.horizon.passed(since + self.policy.topology_patience_seconds)

    def _state(self) -> State:
        """What steps 1-11 of `_consider` read besides the job: the ledger (its stamp, which
        also moves with every preemption), the search budget and the reservations (one may
        hold no GPU: none was free on its nodes)."""
        return (self.ledger.stamp, self.searches_left, len(self.reserver.reservations))

    def _waits_for_capacity(
        self,
        job: PendingJob,
        fit: int,
        free: int,
        blocked: reasons.GuaranteeBlocked | None = None,
    ) -> Reason:
        """Step 11 of `_consider`, with the workers that fit now and the free GPUs (and, for a
        job within its guarantee whose reclaim found no room, what stops it)."""
        if not self.explain:
            return _UNEXPLAINED
        key = (job.team, job.flavor)
        ahead = self.waiting_in_team.get(key, 0)
        self.waiting_in_team[key] = ahead + 1
        short = None
        if fit < job.workers:
            fl = self.ledger.flavors[job.flavor]
            if fl.room is not None:
                short = fl.short(job.gpus_per_worker, job.cpu_per_worker, job.memory_per_worker)
        return reasons.no_capacity(job, fit, free, ahead, self._beyond_share(job), blocked, short)

    def _beyond_share(self, job: PendingJob) -> reasons.BeyondShare | None:
        """When `job` would take its team past its fair share (it can start only on GPUs the
        other teams leave free, or once its team's jobs leave it room): the share, the GPUs the
        team holds, and how many of them its jobs started since this one was submitted hold."""
        share = self.fair_share.get((job.team, job.flavor), 0)
        in_use = self.ledger.in_use(job.team, job.flavor)
        if in_use + job.gpus <= share:
            return None
        older = self.held_before.gpus(job.team, job.flavor, job.submitted_at)
        return reasons.BeyondShare(share, in_use, max(in_use - older, 0))

    def _decide(self, job: PendingJob) -> Reason | None:
        """Steps 1-11 of `_consider`."""
        ledger = self.ledger
        if self.promised:
            # The GPUs coming back for this job join the incoming ones: it claims them at
            # step 8 (or starts on free GPUs, and they are left to the jobs after it).
            for flavor, node, gpus, job_id in self.promised.pop(job.id, ()):
                ledger.come_back(flavor, node, gpus, job_id)
        if job.shared:
            return self._decide_shared(job)
        flavor = job.flavor
        fl = ledger.flavors.get(flavor)
        g = job.gpus_per_worker
        gpus = job.gpus
        cpu, memory = job.cpu_per_worker, job.memory_per_worker
        # 1. (Whole workers only count for a gang of several: one worker fits the largest. On
        #    nodes that limit CPU, memory or pods, every worker is counted against them.)
        if (
            fl is None
            or gpus <= 0  # a malformed gang (no workers or no GPUs) can never be placed either
            or fl.max_node < g
            or fl.total_capacity < gpus
            or (
                not pods_fit(fl, job.pods)
                if job.pods  # each pod of its own size
                else (job.workers > 1 or fl.room is not None)
                and fl.most_workers(g, cpu, memory) < job.workers
            )
        ):
            if fl is None:
                return reasons.never_fits(job, 0, 0, 0)
            most = fl.most_workers(g, cpu, memory) if g > 0 else 0
            short = fl.never_short(g, cpu, memory) if g > 0 else None
            return reasons.never_fits(job, fl.max_node, fl.total_capacity, most, short)
        # A level of its flavor (else, levels changed since it was submitted: anywhere).
        topology = (
            self.topology if job.topology_level and self.topology.level_of(job) >= 0 else None
        )
        strict = topology is not None and (job.topology_required or self._holds_out(job))
        if topology is not None and job.topology_required:
            never = topology.never(fl, job)
            if never is not None:
                return reasons.no_domain(job, never, fl.fits(g, "", cpu, memory), fl.total_free)
        groups = self.groups.get((job.team, flavor))
        if groups is None:  # a team the snapshot does not list: no quota anywhere
            groups = [(job.team, None)]
        # 2.
        for group, quota in groups:
            if quota is None:
                return reasons.no_quota(job, _scope(job, group))
        # 3.
        if not job.preemptible:
            for group, quota in groups:
                assert quota is not None
                used = ledger.nonpreemptible.get((group, flavor), 0)
                if ledger.nonpreemptible_milli:  # fractions, rounded up: exact against integers
                    used += ceil_gpus(ledger.nonpreemptible_milli.get((group, flavor), 0))
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
                newer = 0
                if self.turns and self.turns.get((job.team, flavor)) is job and group == job.team:
                    newer = self._newer_gpus(job.team, flavor, job.submitted_at)
                return reasons.over_limit(job, _scope(job, group), quota.limit, in_use, newer)
        # 4c. The team's turn (ordering.py, rule 1b): a newer job of no higher priority starts
        #     only while it leaves the older job room under the team's limit, or when its max
        #     runtime ends before the older job's reservation starts (a backfill).
        if self.turns:
            turn = self.turns.get((job.team, flavor))
            if (
                turn is not None
                and self._held_for(job, turn)
                and not self.reserver.ends_before(turn.id, job.max_runtime)
            ):
                limit = self.quotas[(job.team, flavor)].limit
                return reasons.held_for_older(job, turn, limit, ledger.in_use(job.team, flavor))
        # 4b. Time-based fair share: a team that owes GPU-time takes no free GPU of an empty node
        #     beyond its share (`_in_debt`), and none at all while another team waits within its
        #     guarantee (`_guarantee_waits`): where the free GPUs hold the job only with an
        #     empty node's, or not at all, it waits (no backfill, no GPUs coming back).
        in_debt, barred = self._debt(job)
        if barred is not None:
            return barred
        workers = job.workers
        # 5. (Counting first is cheap; placement only runs when it will succeed.)
        strategy = self.policy.placement
        if (
            job.pods
            and topology is None
            and fl.total_free >= gpus
            and (found_pods := self._fit_pods(job, fl)) is not None
        ):
            if in_debt and self._opens_a_node(fl, found_pods[0]):
                return self._in_debt_reason(job)
            self._admit(job, found_pods[0], pods=found_pods[1])
            return None
        if fl.total_free >= gpus and fl.fits(g, "", cpu, memory) >= workers:
            domain = ""
            if topology is not None:  # one domain of its level (topology.py)
                placement, domain = self._in_domain(job, fl, None)
            elif self.special.places(fl):  # fragmentation, or models that pending jobs require
                found = self.special.place(job, fl)
                placement = None if found is None else found[0]
            elif in_debt and workers == 1:
                placement = self._on_nodes_in_use(job, fl)
                if placement is None:
                    return self._in_debt_reason(job)
            else:
                # On a flavor with levels, in the tightest rack (topology.py, `pack`): racks
                # already broken into fill up, and whole ones stay whole for the gangs.
                packed = self.topology.pack(fl, job, strategy) if self.topology.levels else None
                placement = (
                    packed.placement
                    if packed is not None
                    else fit_gang(fl, workers, g, strategy, None, cpu, memory)
                )
            if placement is not None:
                if in_debt and self._opens_a_node(fl, placement):
                    return self._in_debt_reason(job)
                self._admit(job, placement, domain=domain)
                return None
        if in_debt:
            return self._in_debt_reason(job)
        if fl.held:
            # 6.
            room = self.reserver.backfill_room(job)
            if room and fl.workers_fit(g, room, cpu, memory) >= workers:
                domain = ""
                if topology is not None:
                    placement, domain = self._in_domain(job, fl, room)
                else:
                    placement = fit_gang(fl, workers, g, strategy, room, cpu, memory)
                if placement is not None:
                    self._admit(job, placement, use_held=room, domain=domain)
                    return None
            # 7. Naming every reservation of the flavor is enough for the reason; finding the
            #    exact nodes would cost a placement per blocked job.
            if fl.fits(g, "held", cpu, memory) >= workers:
                return self.reserver.behind(job)
        # 8.
        if fl.incoming and fl.fits(g, "incoming", cpu, memory) >= workers:
            if topology is not None:
                placement, _ = self._in_domain(job, fl, fl.incoming, True)
            else:
                placement = fit_gang(fl, workers, g, strategy, fl.incoming, cpu, memory, True)
            if placement is not None:
                waited = self._incoming_jobs(job.flavor, placement)
                self._take(job, placement, use_incoming=True)
                return self._waiting_for(job, waited)
        # 9. (The budget is checked here first: most jobs of a busy cycle get this far.)
        policy = self.policy
        entitled = False
        if self.may_search():
            # The first job of a team that is owed GPU-time may reclaim beyond its share.
            reclaim = policy.reclaim and (self.search.may_reclaim(job) or job.id in self.owed)
            left = self.searches_left
            waiting = self._preempt(job, fl, reclaim=reclaim)
            if waiting is not None:
                return waiting
            # Its own search ran and failed (a bigger gang of a kind that failed is not searched
            # for: it waits behind the first, step 11).
            entitled = self.searches_left < left and reclaim and self.search.within_guarantee(job)
        # 10.
        if job.id in self.starving:
            # A gang past its patience holds out only for a domain it can be given
            # (`_holds_out`, b): else it is decided again, as one that takes what fits.
            past = strict and not job.topology_required and self._past_patience(job)
            if past:
                hold = self._split_bound(job)
                reservation = self.reserver.reserve(job, True, known=True, beyond=hold)
            else:
                reservation = self.reserver.reserve(job, strict)
            if reservation is None and past:
                self._holding_out[job.id] = False
                return self._decide(job)
            if reservation is not None:
                return reasons.reserved(
                    job,
                    reservation.expected_start,
                    len(reservation.placement),
                    team_holds_none=job.id in self.owed,
                )
        # 11. (When reclaim can start only explains: rolled back what-ifs.)
        blocked = None
        if entitled and self.explain:
            budget = policy.max_preemptions_per_cycle - len(self.preemptions)
            why = self.reclaim_waits.reason(job, fl, self._limit_ok(job), budget)
            if why is not None:
                key = (job.team, job.flavor)
                self.waiting_in_team[key] = self.waiting_in_team.get(key, 0) + 1
                return why
            blocked = self.reclaim_waits.blocked(job)
        fit = fl.fits(g, "", cpu, memory)
        if strict and self.explain:
            assert topology is not None
            # Its level is what it waits for: how close the best domain comes.
            best = topology.best(fl, job)
            return reasons.no_domain(job, best, fit, fl.total_free)
        return self._waits_for_capacity(job, fit, fl.total_free, blocked)

    def _in_domain(
        self,
        job: PendingJob,
        fl: FlavorLedger,
        extra: dict[str, int] | None,
        incoming: bool = False,
    ) -> tuple[Placement | None, str]:
        """Steps 5, 6 and 8 for a job with a topology level: one domain of its level (a
        preferred level: of an outer level, else anywhere, as any job)."""
        cpu, memory = job.cpu_per_worker, job.memory_per_worker
        strict = job.topology_required or self._holds_out(job)
        found = self.topology.place(fl, job, self.policy.placement, extra, incoming, strict)
        if found is not None:
            return found.placement, found.domain
        if strict:
            return None, ""
        strategy = self.policy.placement
        g = job.gpus_per_worker
        return fit_gang(fl, job.workers, g, strategy, extra, cpu, memory, incoming), ""

    def may_search(self) -> bool:
        """Whether a victim search may still run in this cycle (its budgets, step 9)."""
        policy = self.policy
        return (
            (policy.preemption or policy.reclaim)
            and self.searches_left > 0
            and len(self.preemptions) < policy.max_preemptions_per_cycle
        )

    def _in_debt(self, job: PendingJob) -> bool:
        """Whether admitting `job` would take its team past its fair share while the team
        holds Policy.share_borrow_debt_seconds x max(fair share, the job's GPUs) more than it
        was entitled to (usage.py): until the balance recovers, it borrows only free GPUs of
        nodes already in use (step 4b)."""
        assert self.balance is not None
        key = (job.team, job.flavor)
        below = self.horizon.below
        if not below(self.balance, key, 0.0):  # no debt: most teams, and the cheapest test
            return False
        share = self.fair_share.get(key, 0)
        if self.ledger.in_use(job.team, job.flavor) + job.gpus <= share:
            return False
        # A debt (minus the balance) past the threshold.
        threshold = self.policy.share_borrow_debt_seconds * max(share, job.gpus)
        return below(self.balance, key, -threshold)

    def _debt(self, job: PendingJob) -> tuple[bool, Reason | None]:
        """Step 4b: whether the job's team is in debt (`_in_debt`), and, when another team
        waits within its guarantee (`_guarantee_waits`), the reason the job waits outright."""
        if self.balance is None or not self._in_debt(job):
            return False, None
        guaranteed = self._guarantee_waits(job)
        return True, None if guaranteed is None else self._in_debt_reason(job, guaranteed)

    def _guarantee_waits(self, job: PendingJob) -> str | None:
        """Another team whose smallest pending job of the flavor would fit within its guarantee
        (the team that waits first, or None): a team in debt borrows nothing while one does
        (4b). Its GPUs filling busy nodes keep those nodes from draining for the guaranteed
        team's job, which then has to reclaim them (on the full replay at 100 %, guarantee
        violations are 139 team-h with this test and 182 without). The pending jobs are those
        of the snapshot: one admitted in this cycle counts in its team's GPUs in use, so the
        test stays exact or errs towards waiting."""
        flavor = job.flavor
        waits = self._within_guarantee.get(flavor)
        if waits is None:
            waits = []
            for (team, of_flavor), queue in self.queues.items():
                guarantee = self.guarantees.get((team, of_flavor), 0)
                if of_flavor == flavor and queue.smallest <= guarantee:
                    waits.append((team, queue.smallest, guarantee))
            waits.sort()
            self._within_guarantee[flavor] = waits
        in_use = self.ledger.in_use
        for team, smallest, guarantee in waits:
            if team != job.team and in_use(team, flavor) + smallest <= guarantee:
                return team
        return None

    def _on_nodes_in_use(self, job: PendingJob, fl: FlavorLedger) -> Placement | None:
        """Step 5 for a single worker of a team in debt (4b): the job placed on free GPUs of
        nodes already in use only. Every empty node is left whole for the jobs that need one:
        a team's one-GPU jobs filling the last GPUs of busy nodes cost no other team anything
        now, but breaking into an empty node keeps an 8-GPU job or a gang waiting for nodes to
        drain. A gang in debt is placed as any (binpack fills the fullest nodes first) and waits
        when that opens an empty node."""
        capacity = fl.capacity
        in_use = {node: free for node, free in fl.free.items() if 0 < free < capacity[node]}
        cap = fl.caps(job.cpu_per_worker, job.memory_per_worker)
        return fit_on(in_use, job.workers, job.gpus_per_worker, self.policy.placement, cap)

    @staticmethod
    def _opens_a_node(fl: FlavorLedger, placement: Placement) -> bool:
        """Whether `placement` takes GPUs of a node that holds none in use (4b: a gang of a team
        in debt, or one placed by its topology level, a special placement or a fraction)."""
        return any(fl.free[node] == fl.capacity[node] for node, _ in placement)

    def _in_debt_reason(self, job: PendingJob, guaranteed: str | None = None) -> Reason:
        """The numbers of `_in_debt`, and when the debt should be back under the threshold
        (`guaranteed`: the team it leaves the GPUs to, `_guarantee_waits`)."""
        assert self.balance is not None
        key = (job.team, job.flavor)
        share = self.fair_share.get(key, 0)
        debt = -self.balance.get(key, 0.0)
        threshold = self.policy.share_borrow_debt_seconds * max(share, job.gpus)
        # While the job waits the team holds what it holds now, and is owed what that leaves
        # of its share (usage.py): the debt falls faster than by decay alone.
        in_use = self.ledger.in_use(job.team, job.flavor)
        wait = seconds_to_recover(
            debt, threshold, self.policy.share_half_life_seconds, max(share - in_use, 0)
        )
        # The debt's value, and when it recovers counted from now.
        recovers = self.horizon.read() + wait
        return reasons.in_share_debt(job, share, in_use, debt, threshold, recovers, guaranteed)

    def _decide_shared(self, job: PendingJob) -> Reason | None:
        """Steps 1-5 and 11 of `_consider` for a job asking a fraction of a GPU or given models
        (shared_gpus.py), its usage counted in thousandths; at 5b it claims GPUs coming back
        (promised to it), or reclaims whole-GPU borrowed work for its guarantee
        (`_claim_shared`). It does not reserve, backfill or preempt by priority."""
        ledger = self.ledger
        flavor = job.flavor
        fl = ledger.flavors.get(flavor)
        # 1.
        never = self.special.never_fits(job, fl)
        if never is not None or fl is None:
            return never or reasons.never_fits(job, 0, 0, 0)
        groups = self.groups.get((job.team, flavor)) or [(job.team, None)]
        # 2.
        for group, quota in groups:
            if quota is None:
                return reasons.no_quota(job, _scope(job, group))
        ask = job.workers * job.gpu_milli if job.gpu_milli else job.gpus * FULL
        # 3.
        if not job.preemptible:
            for group, quota in groups:
                assert quota is not None
                used = ledger.nonpreemptible_in_milli(group, flavor)
                if used + ask > quota.guarantee * FULL:
                    why = reasons.over_fair_share(
                        job, _scope(job, group), quota.guarantee, ceil_gpus(used)
                    )
                    return reasons.in_thousandths(why, job, used, ask)
        # 4.
        for group, quota in groups:
            assert quota is not None
            in_use = ledger.in_use_milli(group, flavor)
            if in_use + ask > quota.limit * FULL:
                why = reasons.over_limit(job, _scope(job, group), quota.limit, ceil_gpus(in_use))
                return reasons.in_thousandths(why, job, in_use, ask)
        # 4b. (Only on nodes in use, at step 5, and nothing while a team waits within its
        #     guarantee.)
        in_debt, barred = self._debt(job)
        if barred is not None:
            return barred
        # 5.
        found = self.special.place(job, fl)
        if found is not None and not (in_debt and self._opens_a_node(fl, found[0])):
            placement, devices = found
            share = self.fair_share.get((job.team, flavor), 0)
            borrowed = (
                job.preemptible and ledger.in_use_milli(job.team, flavor) + ask > share * FULL
            )
            if job.gpu_milli:
                ledger.admit_shared(
                    job.team,
                    flavor,
                    job.gpu_milli,
                    job.preemptible,
                    placement,
                    devices,
                    job.cpu_per_worker,
                    job.memory_per_worker,
                )
            else:
                self._take(job, placement)
            pods = pod_nodes(placement) if job.pods else ()
            self.admissions.append(Admission(job.id, placement, borrowed, devices, pods=pods))
            return None
        if in_debt:
            return self._in_debt_reason(job)
        # 5b.
        waiting = self._claim_shared(job, fl, ask, groups)
        if waiting is not None:
            return waiting
        # 11.
        if not self.explain:
            return _UNEXPLAINED
        key = (job.team, flavor)
        ahead = self.waiting_in_team.get(key, 0)
        self.waiting_in_team[key] = ahead + 1
        fit, free, most = self.special.room(job, fl)
        why = reasons.no_capacity(job, fit, free, ahead, self._beyond_share(job))
        return reasons.with_shared(why, job, most)

    def _claim_shared(
        self,
        job: PendingJob,
        fl: FlavorLedger,
        ask: int,
        groups: list[tuple[str, Quota | None]],
    ) -> Reason | None:
        """Step 5b for a job of `_decide_shared` that free room does not hold: it claims the
        GPUs coming back that hold it (those promised to it join `incoming` in `_decide`); if
        they do not, and its gang keeps its team within its guarantee, it reclaims whole-GPU
        borrowed work on nodes it may use (`VictimSearch.for_room`) and claims what that frees.
        Either way it waits for them, named in its reason; None: nothing to claim."""
        special, ledger, policy = self.special, self.ledger, self.policy
        claim = special.claim(job, fl)
        victims: list[RunningJob] = []
        if claim is None:
            budget = policy.max_preemptions_per_cycle - len(self.preemptions)
            guarantees = self.search.guarantees
            if (
                not policy.reclaim
                or budget <= 0
                or self.searches_left <= 0
                or any(
                    ledger.in_use_milli(group, job.flavor) + ask
                    > guarantees.get((group, job.flavor), 0) * FULL
                    for group, _ in groups
                )
            ):
                return None
            self.searches_left -= 1
            eligible = frozenset(special.nodes(fl, job.gpu_models))
            found = self.search.for_room(
                job, eligible, lambda: special.claim(job, fl) is not None, budget
            )
            if found is None:
                return None
            victims = found
            claim = special.claim(job, fl)
            assert claim is not None
        placement, taken = claim
        waited = set(self._incoming_jobs(job.flavor, placement))
        if job.gpu_milli:
            ledger.claim_shared(
                job.team,
                job.flavor,
                job.gpu_milli,
                job.preemptible,
                placement,
                taken,
                job.cpu_per_worker,
                job.memory_per_worker,
            )
        else:
            self._take(job, placement, use_incoming=True)
        return self._preempted_for(job, [(v, RECLAIM) for v in victims], waited)

    def _admit(
        self,
        job: PendingJob,
        placement: Placement,
        use_held: dict[str, int] | None = None,
        domain: str = "",
        pods: tuple[str, ...] = (),
    ) -> None:
        fair_share = self.fair_share.get((job.team, job.flavor), 0)
        borrowed = (
            job.preemptible and self.ledger.in_use(job.team, job.flavor) + job.gpus > fair_share
        )
        pods = (pods or pod_nodes(placement)) if job.pods else ()
        self._take(job, placement, use_held=use_held, pods=pods)
        self.admissions.append(Admission(job.id, placement, borrowed, domain=domain, pods=pods))

    def _take(
        self,
        job: PendingJob,
        placement: Placement,
        use_incoming: bool = False,
        use_held: dict[str, int] | None = None,
        pods: tuple[str, ...] = (),
    ) -> None:
        """The ledger takes the job's GPUs, CPU and memory on its placement and charges its
        team: a gang of pods of different asks takes each pod's own on its node (`pods`; by
        default the placement's slots in order, model.pod_nodes), not its slot's."""
        if job.pods:
            asks = node_asks(pods or pod_nodes(placement), job.pods)
            self.ledger.admit_asks(
                job.team, job.user, job.flavor, job.preemptible, asks, use_incoming, use_held
            )
            return
        self.ledger.admit(
            job.team,
            job.user,
            job.flavor,
            job.gpus_per_worker,
            job.preemptible,
            placement,
            use_incoming,
            use_held,
            cpu=job.cpu_per_worker,
            memory=job.memory_per_worker,
        )

    def _fit_pods(
        self, job: PendingJob, fl: FlavorLedger
    ) -> tuple[Placement, tuple[str, ...]] | None:
        """Step 5 for a gang of pods of different asks on free GPUs: the pods of each ask in
        turn, largest first, placed as a gang of their own in what the ones before left (a
        what-if on the ledger, rolled back), so that a 1-GPU head fills a busy node instead
        of a slot of its workers' size. Bin-packed whatever the policy, as step 1 judges it
        (`placement.pods_fit`). The placement and each pod's node, or None. (Other steps plan
        every pod in a slot of the largest: `PendingJob.pods`.)"""
        nodes = [""] * len(job.pods)
        ledger = self.ledger
        mark = ledger.checkpoint()
        try:
            for (gpus, cpu, memory), index in by_ask(job.pods):
                placed = fit_gang(fl, len(index), gpus, BINPACK, None, cpu, memory)
                if placed is None:
                    return None
                for i, node in zip(index, pod_nodes(placed), strict=True):
                    nodes[i] = node
                ledger.admit(
                    job.team,
                    job.user,
                    job.flavor,
                    gpus,
                    job.preemptible,
                    placed,
                    cpu=cpu,
                    memory=memory,
                )
        finally:
            ledger.rollback(mark)
        counts = Counter(nodes)
        return tuple(sorted(counts.items())), tuple(nodes)

    def _limit_ok(self, job: PendingJob) -> Callable[[], bool]:
        """Whether the team (and department) would stay within its limit with `job` admitted,
        asked of the ledger as a victim search changes it."""
        ledger = self.ledger
        chain = self.chains.get(job.team, (job.team,))
        limits = [(group, self.quotas[(group, job.flavor)].limit) for group in chain]

        def limit_ok() -> bool:
            return all(
                ledger.in_use(group, job.flavor) + job.gpus <= limit for group, limit in limits
            )

        return limit_ok

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
        key = (
            job.team,
            job.flavor,
            job.gpus_per_worker,
            job.priority,
            reclaim,
            job.topology_level,
            job.topology_required or bool(job.topology_level and self._holds_out(job)),
            job.pods,
        )
        if self.failed_search.get(key, job.workers + 1) <= job.workers:
            return None
        self.searches_left -= 1
        ledger = self.ledger
        g = job.gpus_per_worker
        mark = ledger.checkpoint()
        victims = self.search.find(job, fl, self._limit_ok(job), reclaim, priority, budget)
        placement = None
        if victims is not None:
            if job.topology_level and self.topology.level_of(job) >= 0:
                placement, _ = self._in_domain(job, fl, fl.incoming, True)
            else:
                placement = fit_gang(
                    fl,
                    job.workers,
                    g,
                    policy.placement,
                    fl.incoming,
                    job.cpu_per_worker,
                    job.memory_per_worker,
                    True,
                )
        if (
            (victims is None or placement is None)
            and (job.topology_required or (job.topology_level and self._holds_out(job)))
            and self.topology.level_of(job) >= 0
        ):
            # A required level, or a preferred one held out for: victims inside one domain,
            # so that a whole domain frees.
            ledger.rollback(mark)
            mark = ledger.checkpoint()
            victims, placement = self._victims_in_domain(job, fl, reclaim, priority, budget)
        if victims is None or placement is None:
            ledger.rollback(mark)
            if job.workers < self.failed_search.get(key, job.workers + 1):
                self.failed_search[key] = job.workers
            return None
        waited = set(self._incoming_jobs(job.flavor, placement))
        self._take(job, placement, use_incoming=True)
        ledger.commit(mark)
        return self._preempted_for(job, victims, waited)

    def _preempted_for(
        self, job: PendingJob, victims: list[tuple[RunningJob, str]], waited: set[int]
    ) -> Reason:
        """Record the victims a job claimed GPUs from; their teams, using less now, move up in
        the order (a priority victim's team is the job's own). The job waits for them and for
        the jobs already leaving its nodes (`waited`)."""
        touched: set[tuple[str, str]] = set()
        for victim, kind in victims:
            self.preemptions.append(Preemption(victim.id, job.id, kind))
            waited.add(victim.id)
            self.ledger.name_incoming(victim)
            if kind != PRIORITY:
                touched.add((victim.team, victim.flavor))
        assert self.order is not None
        for team, flavor in sorted(touched):
            self.order.touch(team, flavor)
        return self._waiting_for(job, tuple(waited))

    def _victims_in_domain(
        self, job: PendingJob, fl: FlavorLedger, reclaim: bool, priority: bool, budget: int
    ) -> tuple[list[tuple[RunningJob, str]] | None, Placement | None]:
        """Step 9 for a required level whose flavor-wide search found no room in one domain
        (topology.py)."""
        if self.topology.level_of(job) < 0:
            return None, None
        search = self.search
        cap = fl.caps(job.cpu_per_worker, job.memory_per_worker, True)
        found = search.each_floor(
            job,
            reclaim,
            lambda: self.topology.victims_in_domain(
                fl,
                self.ledger,
                job,
                search.eligible(job, reclaim, priority),
                lambda victim, kind: search.take(job, fl, victim, kind),
                self._limit_ok(job),
                budget,
                self.policy.placement,
                cap,
            ),
        )
        if found is None:
            return None, None
        return found[0], found[1].placement

    def _draining_jobs(self) -> dict[int, tuple[int, str | None]]:
        """Job id -> the GPUs its terminating pods hold, and its team when it is pending."""
        if self._draining is None:
            teams = {job.id: job.team for job in self.snapshot.pending}
            self._draining = {}
            for node in self.snapshot.nodes:
                for draining in node.draining:
                    held, _ = self._draining.get(draining.job_id, (0, None))
                    team = teams.get(draining.job_id)
                    self._draining[draining.job_id] = (held + draining.gpus, team)
        return self._draining

    def _waiting_for(self, job: PendingJob, waited: tuple[int, ...]) -> Reason:
        """WAITING_FOR_PREEMPTION: the jobs waited on, the GPUs they give back, their teams,
        and until when they may be saving a checkpoint (a victim of this plan from now)."""
        if not self.explain:
            return _UNEXPLAINED_PREEMPTION
        by_id = self.ledger.leaving_jobs
        gpus = stopping = 0
        teams = set()
        until: float | None = -math.inf
        for job_id in waited:
            victim = by_id.get(job_id)
            if victim is None:  # stopped: its pods are terminating (`Node.draining`)
                held, team = self._draining_jobs()[job_id]
                gpus += held
                stopping += 1
                if team is not None:
                    teams.add(team)
                until = None
                continue
            gpus += victim.gpus
            teams.add(victim.team)
            grace = victim.checkpoint_grace
            if grace is None or until is None:
                until = None
                continue
            since = victim.preempting_since
            if since is None:  # a victim of this plan: asked from now
                since = self.horizon.read()
            until = max(until, since + grace)
        if until == -math.inf:
            until = None
        return reasons.waiting_for_preemption(
            job, waited, gpus, tuple(sorted(teams)), until, stopping
        )


class Settled:
    """For a plan that explains nothing (`plan(explain=False)`): whether any job still to be
    considered could be admitted or preempt for, read after the starving jobs (which alone
    reserve) as the order goes on.

    None of the rest can when no victim search is left, and in every flavor the free GPUs are
    fewer than its smallest pending gang's and no job left could backfill onto held GPUs (its
    max runtime, or margin on its prediction, ends after every reservation's start:
    `Reserver.backfill_room`). Step 8's claims
    on GPUs coming back admit nothing. tests/scheduler/test_explain.py compares the plans.
    """

    __slots__ = ("_backfill", "_backfillers", "_cycle", "_key", "_smallest", "_window", "done")

    def __init__(self, cycle: Cycle) -> None:
        self._cycle = cycle
        self.done = False
        self._key: State | None = None
        self._smallest: dict[str, int] = {}
        for (_, flavor), queue in cycle.queues.items():
            self._smallest[flavor] = min(queue.smallest, self._smallest.get(flavor, queue.smallest))
        # Per flavor, the longest max runtime that ends before some reservation's start, and
        # how many jobs still to be considered have one that short.
        self._window: dict[str, float] = {}
        for (flavor, _), owner in cycle.reserver.node_owner.items():
            wait = cycle.horizon.until(owner.expected_start)
            self._window[flavor] = max(wait, self._window.get(flavor, wait))
        self._backfill: dict[str, int] = {}  # a flavor with no such job is left out
        # The jobs whose runtime fits their flavor's window (neither moves within a plan),
        # asked for each job `stops` takes off a run.
        self._backfillers: set[int] = set()
        if self._window:  # with no reservation, no job backfills
            policy = cycle.policy
            for job in cycle.snapshot.pending:
                window = self._window.get(job.flavor)
                if window is None:
                    continue
                runtime = backfill_runtime(job, policy)
                if runtime is None or runtime > window:
                    continue
                self._backfillers.add(job.id)
                if job.id not in cycle.starving:
                    self._backfill[job.flavor] = self._backfill.get(job.flavor, 0) + 1

    def _may_backfill(self, job: PendingJob) -> bool:
        return job.id in self._backfillers

    def stops(self, run: list[PendingJob]) -> bool:
        """Whether to consider no more of `run` (its next job is its last).

        1. Take from its end the jobs whose kind has a verdict at the cycle's state
           (`Cycle._consider`): deciding them would change nothing, and this plan records
           nothing for a job left pending. Most jobs of a busy cycle are such jobs; a job that
           may backfill stays, to be counted below, and so does a job GPUs are promised to.
        2. Stop when the run is used up, or when nothing is left to decide (`done`), the next
           job being the run's last.
        """
        cycle = self._cycle
        verdicts = cycle._verdicts
        # A preemption moves the ledger's stamp too; taking jobs off the run moves nothing.
        state = cycle._state()
        promised = cycle.promised
        hit = verdicts.get(run[-1].kind)
        while hit is not None and hit[0] == state:
            if self._backfill and self._may_backfill(run[-1]):
                break
            if promised and run[-1].id in promised:
                break  # deciding it hands what was promised to it on (`Cycle._decide`)
            run.pop()
            if not run:
                return True
            hit = verdicts.get(run[-1].kind)
        job = run[-1]
        if state != self._key:
            self._key = state
            self.done = self._nothing_left()
        if self._backfill and not self.done and self._may_backfill(job):
            left = self._backfill[job.flavor] - 1
            if left:
                self._backfill[job.flavor] = left
            else:
                del self._backfill[job.flavor]
                self._key = None  # read again at the next job
        return self.done

    def _nothing_left(self) -> bool:
        cycle = self._cycle
        if cycle.may_search() or cycle.special.any_pending:
            return False  # a fraction may fit on a partly used GPU with no whole GPU free
        for flavor, fl in cycle.ledger.flavors.items():
            smallest = self._smallest.get(flavor)
            if smallest is None:
                continue  # nothing pending there
            if fl.total_free >= smallest:
                return False
            if self._backfill.get(flavor) and any(fl.held.values()):
                return False
        return True


# The reason of a job left pending in a plan that explains nothing (`Cycle.explain`).
_UNEXPLAINED = Reason(ReasonCode.NO_CAPACITY)
_UNEXPLAINED_PREEMPTION = Reason(ReasonCode.WAITING_FOR_PREEMPTION)
# The cycle's state (`Cycle._state`).
State = tuple[int, int, int]
# A kept verdict: the state, and the reason (None: waits for capacity, with the workers that
# fit and the free GPUs, for a reason of its own).
Verdict = tuple[State, Reason | None, int, int]
_WAITS = (ReasonCode.NO_CAPACITY, ReasonCode.QUEUED_BEHIND_TEAM)


def _scope(job: PendingJob, group: str) -> str:
    return "team" if group == job.team else "department"
