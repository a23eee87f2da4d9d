"""forecast(): when each pending job is expected to start.

The engine is run forward in virtual time on the snapshot: running jobs end at their start plus
their expected runtime (or max runtime), preempted jobs give their GPUs back after the grace and
queue again, nothing new arrives, and share balances (time-based fair share, usage.py) move as
the jobs the forecast runs hold GPUs: a team in debt borrows again once its debt has decayed.
A job's forecast is the virtual time of the cycle that admits it. Jobs whose start depends on a
job with no known runtime, or that lie beyond `max_steps` cycles, get None: an honest "cannot
tell" beats a made-up date; so do jobs that no state of the cluster admits (never.py), which
the forecast does not wait for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpuqueue.scheduler.engine import QUEUE_KEY, plan
from gpuqueue.scheduler.fairshare import capacity_by_flavor
from gpuqueue.scheduler.model import PendingJob, Plan, Policy, RunningJob, Snapshot, node_asks
from gpuqueue.scheduler.never import never_admitted
from gpuqueue.scheduler.starvation import expected_end
from gpuqueue.scheduler.usage import Key, ShareBalance, held_and_asked


def forecast(
    snapshot: Snapshot,
    policy: Policy | None = None,
    *,
    max_steps: int = 200,
    precision: float = 0.1,
    min_step: float = 60.0,
) -> Mapping[int, float | None]:
    """Estimated start per pending job id (None when it cannot be estimated).

    1. Plan at the current virtual time (a plan that explains nothing: reasons and positions
       are not read here, and it stops once nothing else could start; engine.Settled).
    2. Apply the plan: admitted jobs start now, victims start leaving.
    3. Move to the next time something can change: a job ends, a preempted job's GPUs come
       back, a job starts to starve, a minimum runtime runs out, or a share balance crosses a
       bound the plan compared it with (a debt decays below the borrowing threshold). The
       balances are advanced over the step with what the teams held and asked in it. Events
       close together are taken in one step: everything within max(min_step, precision x the
       time from now) of the next event, so that a cluster with thousands of distinct end
       times is replayed in a bounded number of cycles; a start is then late by at most that
       window, never early. (`precision` 0.1 rather than 0.05: estimates as honest
       against the starts on the whole, a third less CPU; docs/benchmarks.md, "What the
       estimates and predictions cost".)
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
    balances = _balances(snapshot, policy)
    # GPUs held and asked per (team, flavor), kept as jobs start, end and queue again.
    held, asked = held_and_asked(running.values(), pending.values())
    # GPUs of terminating pods (Node.draining) count as back from the second step on: pods
    # terminate within their checkpoint grace, seconds to minutes, about a step or less.
    nodes = snapshot.nodes
    for _ in range(max_steps):
        state = replace(
            snapshot,
            nodes=nodes,
            now=now,
            running=tuple(running.values()),
            pending=tuple(pending.values()),
            share_balance=snapshot.share_balance if balances is None else balances.snapshot(),
        )
        result = plan(state, policy, explain=False)  # admissions and preemptions are read
        if any(node.draining for node in nodes):
            nodes = tuple(replace(node, draining=()) for node in nodes)
        for admission in result.admissions:
            job = pending.pop(admission.job_id)
            if admission.job_id in awaited:
                awaited.discard(admission.job_id)
                starts[admission.job_id] = now
            running[job.id] = _started(
                job, admission.placement, now, admission.devices, admission.pods
            )
            _move(asked, held, job)
        for preemption in result.preemptions:
            victim = running[preemption.job_id]
            running[victim.id] = replace(
                victim, preempting_since=now, preempted_for=preemption.for_job_id
            )
        if not awaited:
            break
        events = _events(now, running.values(), pending.values(), policy, min_step)
        if balances is not None:
            events = sorted(events + _crossings(now, balances, held, asked, result))
        if not events:
            break
        window = max(min_step, precision * (events[0] - snapshot.now))
        now = max(t for t in events if t <= events[0] + window)
        if balances is not None:
            balances.advance(now, held, asked)  # what the step's state held and asked
        for done in list(running.values()):
            if expected_end(done, policy) <= now:
                del running[done.id]
                if done.preempting_since is not None:
                    pending[done.id] = _requeued(done, originals)
                    _move(held, asked, done)
                else:
                    held[done.team, done.flavor] -= done.gpus
    return starts


def _move(source: dict[Key, int], target: dict[Key, int], job: PendingJob | RunningJob) -> None:
    key = (job.team, job.flavor)
    source[key] -= job.gpus
    target[key] = target.get(key, 0) + job.gpus


def _balances(snapshot: Snapshot, policy: Policy) -> ShareBalance | None:
    """The snapshot's balances, to be advanced step by step; None when the plans read none."""
    if not policy.time_based_share or snapshot.share_balance is None:
        return None
    return ShareBalance(
        snapshot.teams,
        capacity_by_flavor(snapshot),
        policy.share_half_life_seconds,
        snapshot.share_balance,
        snapshot.now,
    )


def _crossings(
    now: float,
    balances: ShareBalance,
    held: Mapping[Key, int],
    asked: Mapping[Key, int],
    result: Plan,
) -> list[float]:
    """When each balance the plan compared with a bound reaches it, if the state stands. A
    second past it: at the crossing itself the balance only equals the bound."""
    gaps = balances.gaps(held, asked)
    times = []
    for key, bound in result.balance_checks:
        after = balances.crossing(key, bound, gaps.get(key, 0.0))
        if after < math.inf:
            times.append(now + after + 1.0)
    return times


def _started(
    job: PendingJob,
    placement: tuple[tuple[str, int], ...],
    now: float,
    devices: tuple[tuple[str, int], ...] = (),
    pods: tuple[str, ...] = (),
) -> RunningJob:
    g = job.gpus_per_worker
    if job.pods:  # each pod's own GPUs, counted one by one
        g = 1
        placement = tuple(sorted((node, gpus) for node, gpus, _ in node_asks(pods, job.pods)))
    return RunningJob(
        id=job.id,
        team=job.team,
        user=job.user,
        flavor=job.flavor,
        gpus_per_worker=g,
        placement=placement,
        priority=job.priority,
        preemptible=job.preemptible,
        started_at=now,
        max_runtime=job.max_runtime,
        expected_runtime=job.expected_runtime,
        gpu_milli=job.gpu_milli,
        devices=devices,
    )


def _requeued(job: RunningJob, original: Mapping[int, PendingJob]) -> PendingJob:
    """A preempted job queues again; it keeps its submission time when the snapshot knows it."""
    known = original.get(job.id)
    if known is not None and known.pods:
        return known  # its pods' asks, which the running job's count of GPUs does not keep
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
        runtime_predicted=known is not None and known.runtime_predicted,
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
