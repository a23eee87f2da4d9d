"""Follow the cluster: node inventory in, workload phases turned into job transitions.

The same code serves every backend; `watch_cluster` calls it in a loop.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from gpuqueue.cluster.base import ClusterBackend, ClusterError, NodeInfo, Phase, WorkloadStatus
from gpuqueue.core.locks import held_by_others, try_xact_lock
from gpuqueue.core.states import FINAL, JobState
from gpuqueue.cycle.launch import launch_admitted
from gpuqueue.cycle.source_sync import sync_sources
from gpuqueue.log_config import SUMMARY_LOGGER
from gpuqueue.models import Job, Node, WorkloadRecord
from gpuqueue.services.jobs.checkpoint import acknowledge_checkpoint, requeue
from gpuqueue.services.jobs.start_failures import requeue_after_start_failure
from gpuqueue.services.jobs.transitions import Move, move_jobs, transition

log = logging.getLogger(__name__)
summary = logging.getLogger(SUMMARY_LOGGER)
ACTOR = "cluster"


@dataclass
class SyncResult:
    ran: bool = True
    transitions: int = 0
    relaunched: list[int] = field(default_factory=list)
    orphans_stopped: int = 0
    released: int = 0  # workers let out of their placement gate
    finished: Counter[str] = field(default_factory=Counter)  # jobs ended, by the cluster's phase


NODE_FIELDS = (
    "capacity",
    "labels",
    "devices",
    "gpu_model",
    "taints",
    "ready",
    "cordoned",
    "used_externally",
    "draining",
    "allocatable_cpu_millicores",
    "allocatable_memory_bytes",
    "allocatable_pods",
    "external_cpu_millicores",
    "external_memory_bytes",
    "external_pods",
)


def sync_nodes(nodes: list[NodeInfo]) -> None:
    """Upsert the inventory; a node the cluster no longer lists holds no new work.

    The sync runs every second: one read of every node, and writes only for what changed.
    """
    existing = {node.name: node for node in Node.objects.all()}
    changed, created = [], []
    latest = {info.name: info for info in nodes}  # a name listed twice: the last entry wins
    for info in latest.values():
        values = {
            "capacity": dict(info.capacity),
            "labels": dict(info.labels),
            "devices": dict(info.devices),
            "gpu_model": info.gpu_model,
            "taints": [dict(t) for t in info.taints],
            "ready": info.ready,
            "cordoned": info.cordoned,
            "used_externally": dict(info.used_externally),
            # JSON object keys are strings: the job id as one.
            "draining": {str(job): dict(gpus) for job, gpus in sorted(info.draining.items())},
            "allocatable_cpu_millicores": info.allocatable_cpu_millicores,
            "allocatable_memory_bytes": info.allocatable_memory_bytes,
            "allocatable_pods": info.allocatable_pods,
            "external_cpu_millicores": info.external_cpu_millicores,
            "external_memory_bytes": info.external_memory_bytes,
            "external_pods": info.external_pods,
        }
        node = existing.pop(info.name, None)
        if node is None:
            created.append(Node(name=info.name, **values))
        elif any(getattr(node, field) != value for field, value in values.items()):
            for field, value in values.items():
                setattr(node, field, value)
            changed.append(node)
    Node.objects.bulk_create(created)
    # bulk_update skips auto_now, so updated_at is set here: it tells when a node last changed.
    now = timezone.now()
    for node in changed:
        node.updated_at = now
    Node.objects.bulk_update(changed, [*NODE_FIELDS, "updated_at"], batch_size=500)
    gone = [name for name, node in existing.items() if node.ready]
    Node.objects.filter(name__in=gone).update(ready=False)


def sync_cluster(backend: ClusterBackend, now: datetime | None = None) -> SyncResult:
    """One pass over the cluster.

    0. Under the cluster-sync advisory lock (one pass at a time), mirror the users' own
       labelled Jobs as jobs, and cancel those whose Job was deleted (`sync_sources`).
    1. Refresh the node inventory:
       GPUs held by anything but the attempts of jobs that hold GPUs count as used by others.
    2. Read the phase of every gpuqueue workload; jobs in namespaces the backend cannot see
       now are left as they are.
    3. Move each job that holds GPUs along: running, finished, lost, checkpointed, or
       requeued with backoff after a failed start. A running gang with a worker on a node
       being drained (cordoned, or tainted by an autoscaler about to remove it) is preempted
       as the cycle preempts, with a checkpoint request, and requeued whole after it; a gang
       that never started there is requeued at once.
    4. After commit: stop what must stop, relaunch admitted jobs that have no workload (a
       crash between admission and launch, or a launch cut short before its Job; none while
       another process launches, or did while the pass read the cluster: it holds the shared
       "launching" lock; nor, until RELAUNCH_AFTER from admission, one whose launch recorded
       its Job: the copy is late), stop
       workloads that belong to no live job (a finished one once it has been kept
       GPUQUEUE_K8S_KEEP_FINISHED_SECONDS, for its logs). The backend reports only workloads
       it proves this database launched (gpuqueue.cluster.proof), so an orphan is always one
       the database recorded: a gang it has no record of (a database restored from an older
       backup, another install) is never stopped.
       Then tell the labelled Jobs where their jobs stand.
    5. Release the gangs whose pods wait for their placement.
    """
    now = now or timezone.now()
    result = SyncResult()
    to_stop: list[tuple[int, int]] = []
    to_launch: list[tuple[int, int, datetime | None]] = []  # (job, attempt, admitted at)
    to_checkpoint: list[tuple[int, int, datetime]] = []
    with transaction.atomic():
        if not try_xact_lock("cluster_sync"):
            return SyncResult(ran=False)
        described = sync_sources(backend)
        # Every job that holds GPUs, in brief: most of them run on and need no more of their
        # row; those a step may move are read whole below.
        holding = [Brief(*row) for row in Job.objects.holding().order_by("id").values_list(*BRIEF)]
        live = {(job.pk, job.attempts) for job in holding}
        # A launch under way while the pass reads the cluster may be missing from the read,
        # even when it has ended by the relaunch below. (No admitted job: nothing to relaunch.)
        admitted = any(job.state == JobState.ADMITTED for job in holding)
        launching = admitted and held_by_others("launching")
        nodes = backend.list_nodes(live)
        sync_nodes(nodes)
        draining = {info.name for info in nodes if info.cordoned}
        statuses = {(s.job_id, s.attempt): s for s in backend.observe()}
        unseen = set(backend.unseen_namespaces())
        moving: list[int] = []
        starts: list[Move] = []
        for job in holding:
            if job.namespace in unseen:
                continue  # its workload cannot be seen now: not gone, left as it is
            status = statuses.get((job.pk, job.attempts))
            if _settled(job, status, now, draining):
                continue
            if status is not None and _started(job, status, draining):
                starts.append(Move(job.pk, job.state, {"started_at": status.since or now}))
            elif _unlaunched(job, status, draining):
                # `_follow` has nothing to do for it: decided from the brief row, without a
                # savepoint and a read of its own (a wave's launch leaves hundreds per pass).
                to_launch.append((job.pk, job.attempts, job.admitted_at))
            else:
                moving.append(job.pk)
        # The gangs that started since the last pass (a wave's thousands) in one move.
        started = move_jobs(
            starts, JobState.RUNNING, reason=STARTED, actor=ACTOR, changes={"start_failures": 0}
        )
        result.transitions += len(started)
        for job in (
            Job.objects.holding().select_related("team").filter(pk__any=moving).order_by("id")
        ):
            key = (job.pk, job.attempts)
            status = statuses.get(key)
            if node := _drained_node(job, status, draining):
                moved, stop, deadline = _drain(job, node, now)
                result.transitions += moved
                if stop:
                    to_stop.append(key)
                elif deadline is not None:
                    to_checkpoint.append((*key, deadline))
                continue
            if _settled(job, status, now):
                continue  # moved meanwhile to where the pass has nothing to do
            moved, stop = _follow_isolated(job, status, now)
            result.transitions += moved
            if moved and status is not None and status.phase in (Phase.SUCCEEDED, Phase.FAILED):
                result.finished[status.phase.value.lower()] += 1
            if stop:
                to_stop.append(key)
            elif status is None and job.state == JobState.ADMITTED:
                to_launch.append((job.pk, job.attempts, job.admitted_at))
        keep = timedelta(seconds=settings.GPUQUEUE_K8S_KEEP_FINISHED_SECONDS)
        orphans = [
            key
            for key, status in statuses.items()
            if key not in live and not _kept(status, now, keep)
        ]
    for job_id, attempt in to_stop + orphans:
        try:
            backend.stop(job_id, attempt)
        except ClusterError as exc:
            log.warning("stop of job %s deferred: %s", job_id, exc)
        except Exception:  # one workload's surprise must not keep the others running
            log.exception("stop of job %s failed; retried next pass", job_id)
    for job_id, attempt, deadline in to_checkpoint:
        try:
            backend.request_checkpoint(job_id, attempt, deadline)
        except ClusterError as exc:
            log.warning("checkpoint signal for job %s deferred: %s", job_id, exc)
    if to_launch and (launching or held_by_others("launching")):
        # A launch was under way (a cycle's, just committed): these are most likely its own
        # jobs; launching them here too would only meet its objects. Left to the next pass.
        to_launch = []
    relaunch = _not_made(to_launch, now) if to_launch else []
    if relaunch:
        launch_admitted(relaunch, backend)
    for describe in described:
        describe.apply(backend)
    result.relaunched = relaunch
    result.orphans_stopped = len(orphans)
    try:  # 5.
        result.released = backend.release_gangs()
    except ClusterError as exc:
        log.warning("release of gangs deferred: %s", exc)
    if result.finished:
        ended = ", ".join(f"{n} {phase}" for phase, n in sorted(result.finished.items()))
        summary.info("cluster: %d finished (%s)", result.finished.total(), ended)
    return result


class Brief(NamedTuple):
    """What the pass reads of every job that holds GPUs, and all that `_settled`,
    `_started`, `_unlaunched` and `_drained_node` read of one (a Job row has the same names):
    tuples, not model instances, as most of them run on and need no more."""

    pk: int
    attempts: int
    state: str
    admitted_at: datetime | None
    placement: dict[str, int]
    namespace: str


BRIEF = ("id", "attempts", "state", "admitted_at", "placement", "team__namespace")


def _settled(
    job: Job | Brief,
    status: WorkloadStatus | None,
    now: datetime,
    draining: set[str] = frozenset(),
) -> bool:
    """Whether the pass would leave the job as it is and its workload running (`_follow`
    and the drain make no step): a job that runs on, or one admitted and starting within its
    timeout, on no node being drained."""
    if _drained_node(job, status, draining) is not None:
        return False
    if status is None:
        return False  # lost, or not launched yet: `_follow` and the relaunch decide
    if status.phase not in (Phase.RUNNING, Phase.STARTING):
        return False
    if job.state == JobState.RUNNING:
        return True
    if job.state == JobState.ADMITTED and status.phase is Phase.STARTING:
        timeout = timedelta(seconds=settings.GPUQUEUE_GANG_READY_TIMEOUT_SECONDS)
        return not (job.admitted_at and now - job.admitted_at > timeout)
    return False


# A start (which sets start_failures to 0: a start that ran ends the run of failed starts, and
# the cap counts consecutive ones, so a long job requeued now and then never nears it).
STARTED = "every worker is running"


# How long an admitted job whose launch recorded its Job may go without the watcher's copy
# showing it before it is launched again (the Job deleted by someone): the copy follows a
# wave's thousands of creates seconds behind.
RELAUNCH_AFTER = timedelta(minutes=2)


def _not_made(unlaunched: list[tuple[int, int, datetime | None]], now: datetime) -> list[int]:
    """Of the admitted jobs the pass found without a workload, the ones to launch again:
    those whose attempt's launch never recorded a Job (a crash, a launch cut short), and those
    whose recorded Job has been missing since their admission RELAUNCH_AFTER ago. A Job
    recorded as made that the copy does not show yet is only late: launching it again would
    meet its own objects."""
    made = set(
        WorkloadRecord.objects.filter(job_id__any=[job for job, _, _ in unlaunched])
        .exclude(job_uid="")
        .values_list("job_id", "attempt")
    )
    return [
        job
        for job, attempt, admitted_at in unlaunched
        if (job, attempt) not in made
        or (admitted_at is not None and now - admitted_at >= RELAUNCH_AFTER)
    ]


def _unlaunched(job: Job | Brief, status: WorkloadStatus | None, draining: set[str]) -> bool:
    """An admitted job with no workload yet (its launch in flight, or cut short) on no node
    being drained: the pass only relaunches it, after commit."""
    return (
        status is None
        and job.state == JobState.ADMITTED
        and _drained_node(job, status, draining) is None
    )


def _started(job: Job | Brief, status: WorkloadStatus, draining: set[str] = frozenset()) -> bool:
    """Whether an admitted job's whole gang now runs, on no node being drained: it starts."""
    return (
        job.state == JobState.ADMITTED
        and status.phase is Phase.RUNNING
        and _drained_node(job, status, draining) is None
    )


def _follow_isolated(job: Job, status: WorkloadStatus | None, now: datetime) -> tuple[int, bool]:
    """`_follow` in a savepoint of its own: a job whose step raises anything but a database
    error is failed with the error in its message and its workload stopped, and the pass goes
    on with the others. (A database error is the database's, not the job's: the pass fails and
    the next one tries again.)"""
    try:
        with transaction.atomic():
            return _follow(job, status, now)
    except DatabaseError:
        raise
    except Exception as exc:
        log.exception("job %s: the sync could not follow it; failing it", job.pk)
        current = Job.objects.get(pk=job.pk)
        if current.state in FINAL:
            return 0, True
        cause = f"gpuqueue could not follow this job: {type(exc).__name__}: {exc}"[:1000]
        failed = transition(
            current, JobState.FAILED, reason=cause, actor=ACTOR, message=cause, finished_at=now
        )
        return int(failed), True


def _drained_node(
    job: Job | Brief, status: WorkloadStatus | None, draining: set[str]
) -> str | None:
    """The first node of the job's placement that is being drained, while the job runs or
    starts there and has not finished; None otherwise."""
    if not draining or job.state not in (JobState.ADMITTED, JobState.RUNNING):
        return None
    if status is not None and status.phase in (Phase.SUCCEEDED, Phase.FAILED):
        return None  # its end is recorded as it is, drain or not
    return next((node for node in sorted(job.placement) if node in draining), None)


def _drain(job: Job, node: str, now: datetime) -> tuple[int, bool, datetime | None]:
    """(transitions, stop the workload, checkpoint deadline to signal) for a job on a node
    being drained. A gang that runs is preempted for no job (the engine never withdraws such
    a preemption): PREEMPTING with its checkpoint grace, then requeued by `_follow` once it
    acknowledged or at the deadline, whichever of its pods the drain evicted meanwhile. A
    gang that never ran is requeued now: nothing to save, and no failed start of its own."""
    if job.state == JobState.ADMITTED and job.started_at is None:
        reason = f"planned node {node} is being drained; requeued"
        return int(requeue(job, reason)), True, None
    deadline = now + timedelta(seconds=job.checkpoint_grace_seconds)
    moved = transition(
        job,
        JobState.PREEMPTING,
        reason=f"node {node} is being drained; checkpoint requested:"
        f" {job.checkpoint_grace_seconds} s to save",
        actor=ACTOR,
        details={"drain": node, "deadline": deadline.isoformat()},
        checkpoint_requested_at=now,
        checkpoint_deadline=deadline,
        checkpoint_acked_at=None,
        preempted_for=None,
    )
    return int(moved), False, deadline if moved else None


def _kept(status: WorkloadStatus, now: datetime, keep: timedelta) -> bool:
    """A finished workload stays for `keep` after it finished, so that its pods' logs can be
    read; anything else that belongs to no live job is stopped at once."""
    finished = status.phase in (Phase.SUCCEEDED, Phase.FAILED)
    return finished and status.since is not None and now - status.since < keep


def _follow(job: Job, status: WorkloadStatus | None, now: datetime) -> tuple[int, bool]:
    """Apply one workload's status to its job; returns (transitions made, stop the workload)."""
    if status is None:
        if job.state == JobState.ADMITTED:
            return 0, False  # not launched yet (or lost before launch): relaunched after commit
        # A running gang whose workload vanished: requeue rather than lose it.
        return int(requeue(job, "the workload disappeared from the cluster")), False
    if job.state == JobState.PREEMPTING and job.checkpoint_acked_at is not None:
        # Acknowledged: it ends as preempted even if its Job completed meanwhile (the workload
        # exits after saving), so that it resumes instead of passing for finished.
        return _requeue_after_stop(job, "preempted; checkpoint acknowledged, requeued")
    if status.phase in (Phase.SUCCEEDED, Phase.FAILED):
        return _finish(job, status), False
    if job.state == JobState.PREEMPTING:
        if status.checkpoint_location and job.checkpoint_acked_at is None:
            acknowledge_checkpoint(job, status.checkpoint_location, ACTOR)
        if job.checkpoint_acked_at is not None:
            return _requeue_after_stop(job, "preempted; checkpoint acknowledged, requeued")
        if job.checkpoint_deadline is not None and now >= job.checkpoint_deadline:
            return _requeue_after_stop(job, "preempted; checkpoint deadline passed, requeued")
        return 0, False
    if status.phase is Phase.LOST and status.start_failure:
        return int(requeue_after_start_failure(job, status.message, now, ACTOR)), True
    if status.phase is Phase.LOST:
        return _requeue_after_stop(job, f"gang broken: {status.message}; requeued")
    if _started(job, status):
        moved = transition(
            job,
            JobState.RUNNING,
            reason=STARTED,
            actor=ACTOR,
            started_at=status.since or now,
            start_failures=0,
        )
        return int(moved), False
    if status.phase is Phase.STARTING and job.state == JobState.ADMITTED:
        timeout = timedelta(seconds=settings.GPUQUEUE_GANG_READY_TIMEOUT_SECONDS)
        if job.admitted_at and now - job.admitted_at > timeout:
            cause = f"gang not ready within {timeout.total_seconds():.0f} s" + (
                f": {status.message}" if status.message else ""
            )
            return int(requeue_after_start_failure(job, cause, now, ACTOR)), True
    return 0, False


def _requeue_after_stop(job: Job, reason: str) -> tuple[int, bool]:
    # The workload is stopped after commit; requeue keeps the checkpoint location.
    return int(requeue(job, reason)), True


def _finish(job: Job, status: WorkloadStatus) -> int:
    to = JobState.SUCCEEDED if status.phase is Phase.SUCCEEDED else JobState.FAILED
    reason = "finished" if to is JobState.SUCCEEDED else f"failed: {status.message or 'error'}"
    changes = {"finished_at": status.since or timezone.now(), "exit_code": status.exit_code}
    if job.started_at is None:
        changes["started_at"] = job.admitted_at
    if to is JobState.FAILED:
        changes["message"] = status.message
    return int(transition(job, to, reason=reason, actor=ACTOR, **changes))
