"""forecast(): when each pending job is expected to start.

The engine is run forward in virtual time on the snapshot: running jobs end at their start plus
their expected runtime (or max runtime), preempted jobs give their GPUs back after the grace and
queue again, nothing new arrives, and share balances stay as they are now (a team in debt
borrows nothing however far ahead the forecast looks). A job's forecast is the virtual time of
the cycle that admits it. Jobs whose start depends on a job with no known runtime, or that lie
beyond `max_steps` cycles, get None: an honest "cannot tell" beats a made-up date; so do jobs
that no state of the cluster admits (never.py), which the forecast does not wait for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpuqueue.scheduler.engine import QUEUE_KEY, plan
from gpuqueue.scheduler.model import PendingJob, Policy, RunningJob, Snapshot
from gpuqueue.scheduler.never import never_admitted
from gpuqueue.scheduler.starvation import expected_end


def forecast(
    snapshot: Snapshot,
    policy: Policy | None = None,
    *,
    max_steps: int = 200,
    precision: float = 0.05,
    min_step: float = 60.0,
) -> Mapping[int, float | None]:
    """Estimated start per pending job id (None when it cannot be estimated).

    1. Plan at the current virtual time (a plan that explains nothing: reasons and positions
       are not read here, and it stops once nothing else could start; engine.Settled).
    2. Apply the plan: admitted jobs start now, victims start leaving.
    3. Move to the next time something can change: a job ends, a preempted job's GPUs come
       back, a job starts to starve, or a minimum runtime runs out. Events close together are
       taken in one step: everything within max(min_step, precision x the time from now) of
       the next event, so that a cluster with thousands of distinct end times is replayed in a
       bounded number of cycles; a start is then late by at most that window, never early.
    4. Stop when every job that can ever start has a start, nothing is left to happen, or
       after `max_steps` cycles.
    """
    policy = policy or Policy()
    starts: dict[int, float | None] = {job.id: None for job in snapshot.pending}
    awaited = set(starts) - never_admitted(snapshot)
    now = snapshot.now
    # A plan depends on the order of neither the running nor the pending jobs (property tests
    # in tests/scheduler/test_properties.py), so both are kept in the order they come.
    running = {job.id: job for job in snapshot.running}
    # Each queue's jobs together, as the engine groups them (Cycle: by runs of one queue).
    pending = {job.id: job for job in sorted(snapshot.pending, key=QUEUE_KEY)}
    originals = dict(pending)
    for _ in range(max_steps):
        state = replace(
            snapshot,
            now=now,
            running=tuple(running.values()),
            pending=tuple(pending.values()),
        )
        result = plan(state, policy, explain=False)  # admissions and preemptions are read
        for admission in result.admissions:
            job = pending.pop(admission.job_id)
            if admission.job_id in awaited:
                awaited.discard(admission.job_id)
                starts[admission.job_id] = now
            running[job.id] = _started(job, admission.placement, now)
        for preemption in result.preemptions:
            victim = running[preemption.job_id]
            running[victim.id] = replace(victim, preempting_since=now)
        if not awaited:
            break
        events = _events(now, running.values(), pending.values(), policy, min_step)
        if not events:
            break
        window = max(min_step, precision * (events[0] - snapshot.now))
        now = max(t for t in events if t <= events[0] + window)
        for done in list(running.values()):
            if expected_end(done, policy) <= now:
                del running[done.id]
                if done.preempting_since is not None:
                    pending[done.id] = _requeued(done, originals)
    return starts


def _started(job: PendingJob, placement: tuple[tuple[str, int], ...], now: float) -> RunningJob:
    return RunningJob(
        id=job.id,
        team=job.team,
        user=job.user,
        flavor=job.flavor,
        gpus_per_worker=job.gpus_per_worker,
        placement=placement,
        priority=job.priority,
        preemptible=job.preemptible,
        started_at=now,
        max_runtime=job.max_runtime,
        expected_runtime=job.expected_runtime,
    )


def _requeued(job: RunningJob, original: Mapping[int, PendingJob]) -> PendingJob:
    """A preempted job queues again; it keeps its submission time when the snapshot knows it."""
    known = original.get(job.id)
    submitted = known.submitted_at if known is not None else job.started_at
    return PendingJob(
        id=job.id,
        team=job.team,
        user=job.user,
        flavor=job.flavor,
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        priority=job.priority,
        preemptible=job.preemptible,
        submitted_at=submitted,
        max_runtime=job.max_runtime,
        expected_runtime=job.expected_runtime,
    )


def _events(
    now: float,
    running: Iterable[RunningJob],
    pending: Iterable[PendingJob],
    policy: Policy,
    min_step: float,
) -> list[float]:
    """The finite times after `now` at which a plan could change, sorted. A job past its
    expected end (it outran its declared runtime) should give its GPUs back at any moment: at
    the next step, `min_step` from now, as the engine's reservations take it to (starvation.py)."""
    times: list[float] = []
    for job in running:
        end = expected_end(job, policy)
        times.append(end if end > now else now + min_step)
        until = job.min_runtime_until
        times.append(until if until is not None else job.started_at + policy.min_runtime_seconds)
    for waiting in pending:
        times.append(waiting.submitted_at + policy.starvation_seconds)
    return sorted(t for t in times if now < t < math.inf)
