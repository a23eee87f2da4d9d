"""The gpuqueue engine as a replay policy: the snapshot is kept up to date incrementally and
handed to `gpuqueue.scheduler.plan` each cycle, deciding exactly as the admission cycle would
(without the reasons and positions, which a replay never reads: `explain=False`)."""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from gpuqueue.scheduler.fairshare import ClaimTuple, water_fill_tuples
from gpuqueue.scheduler.model import PendingJob, Policy, RunningJob, Snapshot, Team
from gpuqueue.scheduler.prediction import release_level
from gpuqueue.scheduler.usage import ShareBalance
from gpuqueue.sim.cluster import LEVELS, Cluster
from gpuqueue.sim.honesty import ForecastSampler
from gpuqueue.sim.ledger import Ledger
from gpuqueue.sim.policies.base import Decision, SchedulingPolicy
from gpuqueue.sim.predicted import ReplayRuntimes
from gpuqueue.sim.queue import OrderedQueue
from gpuqueue.sim.run import JobRun


class GpuqueueEngine(SchedulingPolicy):
    """Runs `plan()` on a snapshot of the replay.

    The engine objects are built once per state change (a PendingJob on submission, a
    RunningJob on start) rather than once per cycle, so a cycle costs a tuple of references
    plus the plan itself.

    Two shortcuts keep a long replay fast (`SimConfig.window=None` and
    `skip_idle_changes=False` turn them off; docs/benchmarks.md measures what they change):

    - `window` (jobs per team, None for all) bounds the pending jobs shown to the engine. Inside
      a team the engine goes by priority, then turn (`PendingJob.rank`), and the window keeps
      the head of that order, plus each team and flavor's `window` oldest jobs, which the
      starvation guard looks at first, and the head of each shape's queue (workers x GPUs):
      jobs of one shape are alike to placement, so every job that could start is shown, not
      only those of the team's first shapes by turn. Pending demand also sets fair shares (a
      team's share is capped by what it asks for), so the window is extended, job by job, until
      the team's demand in the snapshot covers its fair share computed from its whole backlog:
      water-filling gives the same shares when every cap stays at or above the share it yields.
    - `skip_idle_changes`: an arrival only asks for a cycle when it could start now (enough free
      GPUs of its flavor), could reclaim (its team stays within its last fair share or its
      guarantee) or could preempt by priority inside its team; GPUs coming back always ask for
      one while jobs wait. Otherwise the next change or idle cycle picks the job up. This is an
      approximation: a cycle can also act on other jobs (a reservation, a preemption whose
      victim's minimum runtime has just passed), which then waits for the next change.
    """

    name = "gpuqueue"
    uses_quotas = True
    time_dependent = True

    def __init__(
        self,
        ledger: Ledger,
        cluster: Cluster,
        teams: Sequence[Team],
        engine_policy: Policy | None = None,
        window: int | None = None,
        runtime_estimates: bool = False,
        skip_idle_changes: bool = True,
        requeue_at_back: bool = False,
        runtimes: ReplayRuntimes | None = None,
        forecast_every: float | None = None,
        gang_level: str = "",
        gang_level_required: bool = False,
    ) -> None:
        super().__init__(ledger)
        # The topology level every gang of several workers asks for (a node label key).
        self.gang_level = LEVELS[gang_level] if gang_level else ""
        self.gang_level_required = gang_level_required
        self.topologies = cluster.topologies()
        # Imported late: the baselines run without the engine.
        from gpuqueue.scheduler import plan

        self._plan = plan
        self.engine_policy = engine_policy or Policy()
        self.window = window
        # What the engine knows of runtimes: the true remaining runtime (`runtime_estimates`, an
        # oracle no service has, for comparison only) or predictions from the jobs finished so
        # far (`runtimes`, the default: what the live cycle knows), or nothing. A pending job's
        # is read when it is queued, a running job's when it starts and when it outlives it.
        # The live cycle reads a pending job's again about every minute; doing that here made
        # the 120 % replay 27 % slower for decisions within its noise (docs/benchmarks.md,
        # "The replay's wall time").
        self.runtime_estimates = runtime_estimates
        self.runtimes = None if runtime_estimates else (runtimes or ReplayRuntimes())
        self._runs: dict[int, JobRun] = {}  # running jobs, for `ReplayRuntimes.overdue`
        # The forecast's honesty (honesty.py), sampled every `forecast_every` seconds.
        self.sampler = (
            ForecastSampler(forecast_every, self.runtimes or ReplayRuntimes())
            if forecast_every
            else None
        )
        self._waiting: dict[int, JobRun] = {}  # pending jobs, for the sampler
        self.skip_idle_changes = skip_idle_changes
        # A requeued job keeps its submission time (its place in line) unless this is set.
        self.requeue_at_back = requeue_at_back
        self.quotas = {(t.id, f): q for t in teams for f, q in t.quotas.items()}
        self._sorted_quotas = sorted(self.quotas.items())
        self.capacity = {f: cluster.capacity(f) for f in cluster.flavors}
        self.used: dict[tuple[str, str], int] = defaultdict(int)  # GPUs held, per team/flavor
        self.asked: dict[tuple[str, str], int] = defaultdict(int)  # GPUs pending, per team/flavor
        self.running_priorities: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.fair_share: dict[tuple[str, str], int] = {}  # from the last plan
        self.dirty = True
        self.nodes = cluster.engine_nodes()
        self._node_gpus = {node.name: node.capacity for node in self.nodes}
        self.teams = tuple(teams)
        self.queues: dict[str, OrderedQueue[PendingJob]] = {t.id: OrderedQueue() for t in teams}
        # The same jobs per (team, flavor) by submission alone: the starvation guard goes by
        # waiting time, not by turn, so the window also shows each one's oldest jobs.
        self.oldest: dict[tuple[str, str], OrderedQueue[PendingJob]] = {}
        # And per (team, flavor, shape) by turn: jobs of one shape are alike to placement, so
        # the head of each shape's queue is every job of that shape that could start (a
        # window by turn alone hides the small jobs behind a team's gangs that do not fit).
        self.shapes: dict[tuple[str, str, int, int], OrderedQueue[PendingJob]] = {}
        # The running jobs as the engine sees them, in the order they started (a job being
        # preempted keeps its place).
        self.running: dict[int, RunningJob] = {}
        # Time-based fair share: each team's balance, kept from cycle to cycle as the live cycle
        # would keep it (usage.py), when the policy asks for it.
        self.share_balance = (
            ShareBalance(teams, self.capacity, self.engine_policy.share_half_life_seconds)
            if self.engine_policy.time_based_share
            else None
        )
        self._preempted_for: dict[int, int] = {}  # this cycle's victims -> their preemptors
        self.plan_seconds = 0.0
        self.plan_max_seconds = 0.0
        self.plans = 0
        self.max_snapshot_pending = 0

    def submitted(self, run: JobRun, now: float) -> None:
        job = run.job
        pending = PendingJob(
            id=job.id,
            team=job.team,
            user=job.user or job.team,
            flavor=job.flavor,
            workers=job.workers,
            gpus_per_worker=job.gpus_per_worker,
            priority=job.priority,
            preemptible=job.preemptible,
            submitted_at=now if self.requeue_at_back and run.preemptions else job.submitted_at,
            expected_runtime=(expected := self._expected(run)),
            runtime_predicted=expected is not None,  # the replay's history (or its oracle)
            topology_level=self.gang_level if job.workers > 1 else "",
            topology_required=self.gang_level_required and job.workers > 1,
            requeued_at=now if run.preemptions else None,
        )
        # The window keeps the head of each team's queue in the engine's order inside a team
        # (`PendingJob.rank`): 1. higher priority; 2. earlier turn (the submission, which a
        # requeued job keeps, plus its aged expected runtime); 3. job id. The engine orders
        # again on its own.
        key = (-float(pending.priority), pending.rank[1], float(job.id))
        self.queues.setdefault(job.team, OrderedQueue()).push(job.id, key, pending)
        oldest = self.oldest.setdefault((job.team, job.flavor), OrderedQueue())
        oldest.push(job.id, (pending.submitted_at, float(job.id)), pending)
        shape = (job.team, job.flavor, job.workers, job.gpus_per_worker)
        self.shapes.setdefault(shape, OrderedQueue()).push(job.id, key, pending)
        if self.sampler is not None:
            self._waiting[job.id] = run
        self.asked[(job.team, job.flavor)] += job.gpus
        if not self.dirty:
            self.dirty = not self.skip_idle_changes or self._may_start(run)

    def _expected(self, run: JobRun) -> float | None:
        if self.runtime_estimates:
            return run.remaining
        return None if self.runtimes is None else self.runtimes.remaining(run)

    def _may_start(self, run: JobRun) -> bool:
        """Whether a new pending job could change the next plan (see the class docstring)."""
        job = run.job
        if self.ledger.free_by_flavor.get(job.flavor, 0) >= job.gpus:
            return True
        key = (job.team, job.flavor)
        if self.share_balance is not None and self.used[key] == 0:
            return True  # the first job of a team that holds nothing may reclaim (ordering.py)
        quota = self.quotas.get(key)
        if quota is None:
            return False
        entitled = max(quota.guarantee, self.fair_share.get(key, 0))
        if self.engine_policy.reclaim and self.used[key] + job.gpus <= entitled:
            return True
        priorities = self.running_priorities[job.team]
        return self.engine_policy.preemption and any(
            n > 0 and p < job.priority for p, n in priorities.items()
        )

    def started(self, run: JobRun, now: float) -> None:
        job = run.job
        self.queues[job.team].remove(job.id)
        self.oldest[(job.team, job.flavor)].remove(job.id)
        self.shapes[(job.team, job.flavor, job.workers, job.gpus_per_worker)].remove(job.id)
        self._waiting.pop(job.id, None)
        self.asked[(job.team, job.flavor)] -= job.gpus
        self.used[(job.team, job.flavor)] += job.gpus
        self.running_priorities[job.team][job.priority] += 1
        expected = run.remaining if self.runtime_estimates else None
        if self.runtimes is not None:
            # Its release, as the service gives it (release_level): by its first node's GPUs.
            node = run.placement_tuple()[0][0]
            level = release_level(job.gpus_per_worker, self._node_gpus[node].get(job.flavor, 0))
            expected = self.runtimes.started(run, now, level)
            self._runs[job.id] = run
        self.running[job.id] = RunningJob(
            id=job.id,
            team=job.team,
            user=job.user or job.team,
            flavor=job.flavor,
            gpus_per_worker=job.gpus_per_worker,
            placement=run.placement_tuple(),
            priority=job.priority,
            preemptible=job.preemptible,
            started_at=now,
            expected_runtime=expected,
            min_runtime_until=now + self.engine_policy.min_runtime_seconds,
        )

    def preempting(self, run: JobRun, now: float) -> None:
        job_id = run.job.id
        # As the live cycle reads it from the preemption's event: the job it was preempted
        # for, to which its GPUs are promised (engine.Cycle.promised).
        self.running[job_id] = replace(
            self.running[job_id],
            preempting_since=now,
            preempted_for=self._preempted_for.pop(job_id, None),
        )

    def stopped(self, run: JobRun, now: float) -> None:
        job = run.job
        del self.running[job.id]
        if self.runtimes is not None:
            self._runs.pop(job.id, None)
            if run.finished_at is not None:
                self.runtimes.finished(run)
        self.used[(job.team, job.flavor)] -= job.gpus
        self.running_priorities[job.team][job.priority] -= 1
        if any(self.queues.values()):
            self.dirty = True

    def wants_cycle(self) -> bool:
        return self.dirty

    def _full_fair_shares(self) -> dict[str, list[tuple[str, int]]]:
        """team -> (flavor, fair share) as the engine would compute them from every pending
        job (fair shares depend on each team's demand capped by its limit)."""
        quotas = self._sorted_quotas
        used = self.used
        asked = self.asked
        caps = [min(quota.limit, used[key] + asked[key]) for key, quota in quotas]
        shares: dict[str, list[tuple[str, int]]] = {}
        for flavor, capacity in self.capacity.items():
            claims: list[ClaimTuple] = [
                (team, quota.guarantee, cap, quota.weight)
                for ((team, f), quota), cap in zip(quotas, caps, strict=True)
                if f == flavor
            ]
            for team, share in water_fill_tuples(capacity, claims).items():
                shares.setdefault(team, []).append((flavor, share))
        return shares

    def _windowed(
        self, queue: OrderedQueue[PendingJob], team: str, shares: list[tuple[str, int]]
    ) -> list[PendingJob]:
        """The head of a team's queue: `window` jobs, then more until, for every flavor, the
        team's demand in the snapshot reaches its full-backlog fair share `shares` (or the
        backlog ends)."""
        assert self.window is not None
        shown: list[PendingJob] = []
        used = self.used
        short = {flavor: share + 1 - used[(team, flavor)] for flavor, share in shares}
        for job in queue.values():
            missing = short.get(job.flavor, 0)
            if len(shown) >= self.window and missing <= 0:
                if all(v <= 0 for v in short.values()):
                    break
                continue
            shown.append(job)
            short[job.flavor] = missing - job.gpus
        return shown

    def _heads_outside(self, shown: tuple[PendingJob, ...]) -> tuple[PendingJob, ...]:
        """Each (team, flavor)'s `window` oldest jobs and each shape's first `window` by turn,
        where the window by turn left them out: with shortest-predicted-first
        (model.RUNTIME_AGING), an old long job can sit behind many short ones, yet it is the one
        the starvation guard must see; and a team's small jobs can sit behind gangs that do not
        fit, yet they are the ones that could start."""
        assert self.window is not None
        ids = {job.id for job in shown}
        extra: list[PendingJob] = []
        for queue in itertools.chain(self.oldest.values(), self.shapes.values()):
            if len(queue) == 0:
                continue
            for job in itertools.islice(queue.values(), self.window):
                if job.id not in ids:
                    ids.add(job.id)
                    extra.append(job)
        return tuple(extra)

    def snapshot(self, now: float) -> Snapshot:
        if self.window is None:
            pending = tuple(itertools.chain.from_iterable(q.values() for q in self.queues.values()))
        else:
            shares = self._full_fair_shares()
            pending = tuple(
                itertools.chain.from_iterable(
                    q.values()
                    if len(q) <= self.window
                    else self._windowed(q, team, shares.get(team, []))
                    for team, q in self.queues.items()
                )
            )
            pending += self._heads_outside(pending)
        if self.runtimes is not None:
            # Jobs that outlived their prediction get a new one (given how long they ran).
            for run, runtime in self.runtimes.overdue(now, self._runs):
                job_id = run.job.id
                self.running[job_id] = replace(self.running[job_id], expected_runtime=runtime)
        balance = None
        if self.share_balance is not None:
            self.share_balance.advance(now, self.used, self.asked)
            balance = self.share_balance.snapshot()
        return Snapshot(
            now=now,
            nodes=self.nodes,
            teams=self.teams,
            running=tuple(self.running.values()),
            pending=pending,
            share_balance=balance,
            topologies=self.topologies,
        )

    def cycle(self, now: float) -> Decision:
        snapshot = self.snapshot(now)
        if self.sampler is not None and self.sampler.due(now):
            # Every pending job, not the window: the service forecasts them all.
            every = tuple(itertools.chain.from_iterable(q.values() for q in self.queues.values()))
            full = replace(snapshot, pending=every)
            self.sampler.sample(full, self._waiting | self._runs, self.engine_policy)
        self.max_snapshot_pending = max(self.max_snapshot_pending, len(snapshot.pending))
        started = time.perf_counter()
        plan = self._plan(snapshot, self.engine_policy, explain=False)  # decisions only
        spent = time.perf_counter() - started
        self.plan_seconds += spent
        self.plan_max_seconds = max(self.plan_max_seconds, spent)
        self.plans += 1
        self.fair_share = dict(plan.fair_shares)
        self._preempted_for = {p.job_id: p.for_job_id for p in plan.preemptions}
        self.dirty = False
        return Decision(
            placements=[(a.job_id, a.placement) for a in plan.admissions],
            preemptions=[(p.job_id, p.reason) for p in plan.preemptions],
        )

    def stats(self) -> dict[str, float]:
        honesty = self.sampler.summary() if self.sampler is not None else {}
        return honesty | {
            "plans": self.plans,
            "plan_seconds_total": round(self.plan_seconds, 3),
            "plan_ms_mean": round(1000 * self.plan_seconds / max(self.plans, 1), 3),
            "plan_ms_max": round(1000 * self.plan_max_seconds, 3),
            "snapshot_pending_max": self.max_snapshot_pending,
        }
