"""The gpuqueue engine as a replay policy: the snapshot is kept up to date incrementally and
handed to `gpuqueue.scheduler.plan` each cycle, exactly as the admission cycle would."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

from gpuqueue.scheduler.model import PendingJob, Policy, RunningJob, Snapshot, Team
from gpuqueue.sim.cluster import Cluster
from gpuqueue.sim.ledger import Ledger
from gpuqueue.sim.policies.base import Decision, SchedulingPolicy
from gpuqueue.sim.queue import OrderedQueue
from gpuqueue.sim.run import JobRun


def _team_key(run: JobRun) -> tuple[float, ...]:
    # 1. Higher priority first; 2. earlier submission (a requeued job keeps its place);
    # 3. job id. The engine orders again on its own; this order only decides the window.
    return (-float(run.job.priority), run.job.submitted_at, float(run.job.id))


class GpuqueueEngine(SchedulingPolicy):
    """Runs `plan()` on a snapshot of the replay.

    The engine objects are built once per state change (a PendingJob on submission, a
    RunningJob on start) rather than once per cycle, so a cycle costs a tuple of references
    plus the plan itself.

    `window` (jobs per team, None for all) bounds the pending jobs shown to the engine. The
    engine admits in order within a team, so jobs deep in a long queue rarely matter; bounding
    them keeps a cycle's cost independent of the backlog. Results with a window are checked
    against full snapshots in the tests and in docs/benchmarks.md.
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
        runtime_estimates: bool = True,
    ) -> None:
        super().__init__(ledger)
        from gpuqueue.scheduler import plan  # imported late: the baselines run without the engine

        self._plan = plan
        self.engine_policy = engine_policy or Policy()
        self.window = window
        self.runtime_estimates = runtime_estimates
        self.nodes = cluster.engine_nodes()
        self.teams = tuple(teams)
        self.queues: dict[str, OrderedQueue[PendingJob]] = {t.id: OrderedQueue() for t in teams}
        self.running: dict[int, RunningJob] = {}
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
            submitted_at=job.submitted_at,
            expected_runtime=run.remaining if self.runtime_estimates else None,
        )
        self.queues.setdefault(job.team, OrderedQueue()).push(job.id, _team_key(run), pending)

    def started(self, run: JobRun, now: float) -> None:
        job = run.job
        self.queues[job.team].remove(job.id)
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
            expected_runtime=run.remaining if self.runtime_estimates else None,
            min_runtime_until=now + self.engine_policy.min_runtime_seconds,
        )

    def preempting(self, run: JobRun, now: float) -> None:
        old = self.running[run.job.id]
        self.running[run.job.id] = RunningJob(
            id=old.id,
            team=old.team,
            user=old.user,
            flavor=old.flavor,
            gpus_per_worker=old.gpus_per_worker,
            placement=old.placement,
            priority=old.priority,
            preemptible=old.preemptible,
            started_at=old.started_at,
            max_runtime=old.max_runtime,
            expected_runtime=old.expected_runtime,
            min_runtime_until=old.min_runtime_until,
            preempting_since=now,
        )

    def stopped(self, run: JobRun, now: float) -> None:
        del self.running[run.job.id]

    def snapshot(self, now: float) -> Snapshot:
        if self.window is None:
            pending = tuple(itertools.chain.from_iterable(q.values() for q in self.queues.values()))
        else:
            pending = tuple(
                itertools.chain.from_iterable(
                    itertools.islice(q.values(), self.window) for q in self.queues.values()
                )
            )
        return Snapshot(
            now=now,
            nodes=self.nodes,
            teams=self.teams,
            running=tuple(self.running.values()),
            pending=pending,
        )

    def cycle(self, now: float) -> Decision:
        snapshot = self.snapshot(now)
        self.max_snapshot_pending = max(self.max_snapshot_pending, len(snapshot.pending))
        started = time.perf_counter()
        plan = self._plan(snapshot, self.engine_policy)
        spent = time.perf_counter() - started
        self.plan_seconds += spent
        self.plan_max_seconds = max(self.plan_max_seconds, spent)
        self.plans += 1
        return Decision(
            placements=[(a.job_id, a.placement) for a in plan.admissions],
            preemptions=[(p.job_id, p.reason) for p in plan.preemptions],
        )

    def stats(self) -> dict[str, float]:
        return {
            "plans": self.plans,
            "plan_seconds_total": round(self.plan_seconds, 3),
            "plan_ms_mean": round(1000 * self.plan_seconds / max(self.plans, 1), 3),
            "plan_ms_max": round(1000 * self.plan_max_seconds, 3),
            "snapshot_pending_max": self.max_snapshot_pending,
        }
