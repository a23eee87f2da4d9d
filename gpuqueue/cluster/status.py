"""Pure: the phase of each gpuqueue workload from its Kubernetes Job, its pods and the nodes.

Input is the API's JSON (dicts); `now` is passed in. No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from gpuqueue.cluster.base import Phase, WorkloadStatus
from gpuqueue.cluster.manifests import CONTAINER, attempt_of, completion_index

Obj = Mapping[str, Any]
PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff"})
# Waiting reasons that no amount of waiting fixes: the job fails at once.
PERMANENT_WAITS = frozenset(
    {"InvalidImageName", "CreateContainerConfigError", "CreateContainerError"}
)
LOST_POD_REASONS = frozenset({"Evicted", "NodeLost", "Terminated", "DeadlineExceeded"})


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _condition(obj: Obj, kind: str) -> Mapping[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def _rank(pod: Obj) -> str:
    return completion_index(pod) or "?"


def _worker_state(pod: Obj) -> Mapping[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            return status.get("state") or {}
    return {}


def _failed_worker(pods: list[Obj]) -> tuple[int | None, str]:
    """The first worker that exited non-zero: (exit code, sentence)."""
    for pod in sorted(pods, key=_rank):
        terminated = _worker_state(pod).get("terminated") or {}
        code = terminated.get("exitCode")
        if code not in (None, 0):
            reason = terminated.get("reason") or "Error"
            return int(code), f"worker {_rank(pod)} exited with code {code} ({reason})"
    return None, ""


def _lost(
    pods: list[Obj],
    nodes: Mapping[str, datetime | None],
    now: datetime,
    grace: timedelta,
) -> str:
    """Why the gang is broken, or "" when it is not. A node that is not ready breaks it only
    after `grace` (a kubelet restart must not end a multi-day gang); a node gone breaks it."""
    for pod in sorted(pods, key=_rank):
        node = (pod.get("spec") or {}).get("nodeName")
        if node and node not in nodes:
            return f"node {node} of worker {_rank(pod)} is gone"
        since = nodes.get(node or "")
        if node and since is not None and now - since >= grace:
            return (
                f"node {node} of worker {_rank(pod)} has not been ready for"
                f" {(now - since).total_seconds():.0f} s"
            )
        if disrupted := _condition(pod, "DisruptionTarget"):
            return f"worker {_rank(pod)} was disrupted ({disrupted.get('reason', 'unknown')})"
        status = pod.get("status") or {}
        if status.get("phase") == "Failed" and status.get("reason") in LOST_POD_REASONS:
            return f"worker {_rank(pod)} was {status['reason'].lower()}"
    return ""


def _waiting(
    pods: list[Obj], since: datetime | None, now: datetime, pull_timeout: timedelta
) -> tuple[bool, str]:
    """(fail now, sentence) for workers that are not running yet."""
    for pod in sorted(pods, key=_rank):
        waiting = _worker_state(pod).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in PERMANENT_WAITS:
            return True, f"worker {_rank(pod)}: {reason}: {waiting.get('message', '')}".rstrip(": ")
        if reason in PULL_FAILURES:
            started = parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or since
            late = started is not None and now - started >= pull_timeout
            message = (
                f"worker {_rank(pod)}: image pull failed ({reason}): {waiting.get('message', '')}"
            )
            return late, message.rstrip(": ")
    for pod in sorted(pods, key=_rank):
        scheduled = _condition(pod, "PodScheduled")
        if (pod.get("status") or {}).get("phase") == "Pending" and scheduled is None:
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("message"):
                    return False, f"worker {_rank(pod)} unschedulable: {condition['message']}"
    return False, ""


def _unplaceable(pods: list[Obj]) -> str:
    """A released worker that kube-scheduler cannot bind to its planned node (something took
    the room after the release): the gang would sit half-bound, so it is a failed start."""
    for pod in sorted(pods, key=_rank):
        spec = pod.get("spec") or {}
        if (spec.get("schedulingGates") or []) or spec.get("nodeName"):
            continue
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if (
                condition.get("type") == "PodScheduled"
                and condition.get("status") == "False"
                and condition.get("reason") == "Unschedulable"
            ):
                detail = condition.get("message") or "unschedulable"
                return f"worker {_rank(pod)} cannot be bound to its planned node: {detail}"
    return ""


def workload_status(
    job: Obj,
    pods: Iterable[Obj],
    nodes: Mapping[str, datetime | None],
    now: datetime,
    pull_timeout: timedelta,
    first_seen: datetime | None = None,
    *,
    node_lost_grace: timedelta = timedelta(0),
    start_problem: str = "",
    key: tuple[int, int] | None = None,
) -> WorkloadStatus:
    """The phase of one attempt. `nodes` maps each node to when it stopped being ready (None
    while ready); `start_problem` is why its gang cannot start, when the caller knows (pods
    refused by the API, planned nodes taken); `key`: the attempt the Job was proven to be
    (gpuqueue.cluster.proof), else read from its labels.

    1. Finished: the Job's Complete or Failed condition (with the failing worker's exit code
       and reason, e.g. OOMKilled, or the Job's own reason, e.g. DeadlineExceeded).
    2. Lost: a worker's node is gone, or not ready for longer than the grace, or the worker
       was disrupted or evicted.
    3. A failed start: the caller's `start_problem`, or a released worker that cannot be bound.
    4. Failed without the Job knowing yet: an image that cannot be pulled (after the timeout)
       or a container that cannot be created.
    5. Running once every worker runs; starting until then, saying what holds it back.
    """
    key = key or attempt_of(job)
    assert key is not None, "only gpuqueue Jobs have a workload status"
    job_id, attempt = key
    pods = list(pods)
    workers = int((job.get("spec") or {}).get("parallelism") or 1)
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp")) or first_seen
    status = job.get("status") or {}

    # 1. Finished
    if done := (_condition(job, "Complete") or _condition(job, "SuccessCriteriaMet")):
        return WorkloadStatus(
            job_id,
            attempt,
            Phase.SUCCEEDED,
            parse_time(status.get("completionTime"))
            or parse_time(done.get("lastTransitionTime"))
            or now,
            exit_code=0,
        )
    if failed := (_condition(job, "Failed") or _condition(job, "FailureTarget")):
        code, message = _failed_worker(pods)
        if not message:
            message = f"{failed.get('reason', 'Failed')}: {failed.get('message', '')}".rstrip(": ")
        return WorkloadStatus(
            job_id,
            attempt,
            Phase.FAILED,
            parse_time(failed.get("lastTransitionTime")) or now,
            exit_code=code,
            message=message,
        )
    # 2. Lost
    if lost := _lost(pods, nodes, now, node_lost_grace):
        return WorkloadStatus(job_id, attempt, Phase.LOST, now, message=lost)
    # 3. A failed start
    if problem := (start_problem or _unplaceable(pods)):
        return WorkloadStatus(job_id, attempt, Phase.LOST, now, message=problem, start_failure=True)
    # 4. Failed before the Job controller noticed (it never does for a stuck image pull).
    fail, message = _waiting(pods, created, now, pull_timeout)
    code, exited = _failed_worker(pods)
    if exited:
        return WorkloadStatus(job_id, attempt, Phase.FAILED, now, exit_code=code, message=exited)
    if fail:
        return WorkloadStatus(job_id, attempt, Phase.FAILED, now, message=message)
    # 5. Running or starting
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if len(running) >= workers:
        starts = [parse_time((p.get("status") or {}).get("startTime")) for p in running]
        known = [s for s in starts if s is not None]
        return WorkloadStatus(job_id, attempt, Phase.RUNNING, max(known) if known else now)
    held_back = message or f"{len(running)} of {workers} workers running"
    return WorkloadStatus(job_id, attempt, Phase.STARTING, created, message=held_back)


def workload_statuses(
    jobs: Mapping[tuple[int, int], Obj],
    pods: Mapping[tuple[int, int], Iterable[Obj]],
    nodes: Mapping[str, datetime | None],
    now: datetime,
    pull_timeout: timedelta,
    first_seen: Mapping[tuple[int, int], datetime] | None = None,
    *,
    node_lost_grace: timedelta = timedelta(0),
    start_problems: Mapping[tuple[int, int], str] | None = None,
) -> list[WorkloadStatus]:
    """One status per attempt of the Jobs and pods gpuqueue proved it made, by attempt
    (gpuqueue.cluster.proof.sort_out: anything else never reaches here), by job and attempt."""
    statuses = []
    for key, job in jobs.items():
        if (job.get("metadata") or {}).get("deletionTimestamp"):
            continue
        statuses.append(
            workload_status(
                job,
                pods.get(key, ()),
                nodes,
                now,
                pull_timeout,
                (first_seen or {}).get(key),
                node_lost_grace=node_lost_grace,
                start_problem=(start_problems or {}).get(key, ""),
                key=key,
            )
        )
    return sorted(statuses, key=lambda s: (s.job_id, s.attempt))
