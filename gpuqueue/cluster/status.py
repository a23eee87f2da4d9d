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
PERMANENT_WAITS = frozenset({"InvalidImageName", "CreateContainerConfigError"})
# Waiting reasons the kubelet retries by itself and that usually pass (a runtime briefly
# unable to create the container, a device not yet reset): a wait within CREATE_GRACE, a failed
# start past it (requeued with backoff, and failed only after the job's own cap of those).
TRANSIENT_WAITS = frozenset({"CreateContainerError", "RunContainerError"})
CREATE_GRACE = timedelta(minutes=2)
LOST_POD_REASONS = frozenset({"Evicted", "NodeLost", "Terminated", "DeadlineExceeded"})
# Why a kubelet refuses or drops a pod that is not the workload's doing: its admission failed
# after a device-plugin restart (UnexpectedAdmissionError), the node lacks what the scheduler
# counted (OutOfnvidia.com/gpu, OutOfcpu, ...), its labels no longer match (NodeAffinity,
# NodeSelector), or it shut down. Such a pod matches no podFailurePolicy rule, so the Job fails;
# the gang is lost, not the user's failure.
NODE_REFUSALS = frozenset(
    {
        "UnexpectedAdmissionError",
        "NodeAffinity",
        "NodeSelector",
        "NodePorts",
        "Shutdown",
        "NodeShutdown",
        "Terminated",
        "Evicted",
        "NodeLost",
    }
)


# A released worker kube-scheduler cannot bind is given this long before its gang counts as a
# failed start: kube-scheduler's own preemption of a lower-priority pod there, or a CPU or memory
# shortfall that a finishing pod ends, resolve within it.
UNSCHEDULABLE_GRACE = timedelta(seconds=60)
# FailedCreate messages of the Job controller that say the API will refuse the pods again
# (a ResourceQuota exceeded, Pod Security, an admission policy or webhook that denied them, an
# invalid pod); anything else (a quota update conflict, a webhook that timed out, a quota not
# computed yet, the API overloaded) is transient, and the Job controller retries by itself.
PERMANENT_REFUSALS = ("is forbidden", "denied the request", "is invalid")
TRANSIENT_REFUSALS = (
    "the object has been modified",
    "status unknown for quota",
    "context deadline exceeded",
    "Timeout:",
    "failed calling webhook",
    "too many requests",
)


def is_permanent_refusal(message: str) -> bool:
    """Whether a FailedCreate message says the pods will be refused again (PERMANENT_REFUSALS)
    rather than by chance this once (TRANSIENT_REFUSALS, and anything unknown)."""
    lowered = message.lower()
    if any(part.lower() in lowered for part in TRANSIENT_REFUSALS):
        return False
    return any(part in lowered for part in PERMANENT_REFUSALS)


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


def is_node_refusal(reason: str) -> bool:
    return reason in NODE_REFUSALS or reason.startswith("OutOf")


def _over_own_limit(pod: Obj) -> bool:
    """Evicted by its kubelet for what the pod itself used past its own limits (ephemeral
    storage of a container or of the pod, an emptyDir's size), not for the node's pressure:
    requeued, it would be evicted again."""
    status = pod.get("status") or {}
    message = str(status.get("message") or "").lower()
    return (
        status.get("reason") == "Evicted" and "limit" in message and "node was low" not in message
    )


def _evicted_over_own_limit(pods: list[Obj]) -> str:
    for pod in sorted(pods, key=_rank):
        if _over_own_limit(pod):
            message = str((pod.get("status") or {}).get("message") or "").strip()
            return f"worker {_rank(pod)} was evicted for exceeding its own limit: {message}"
    return ""


def _refused_by_node(pods: list[Obj]) -> str:
    """The first worker its node refused or dropped (NODE_REFUSALS), as a sentence, or ""."""
    for pod in sorted(pods, key=_rank):
        status = pod.get("status") or {}
        reason = str(status.get("reason") or "")
        if status.get("phase") == "Failed" and is_node_refusal(reason) and not _over_own_limit(pod):
            node = (pod.get("spec") or {}).get("nodeName") or "its node"
            message = str(status.get("message") or "").strip()
            return f"worker {_rank(pod)} was refused by {node}: {reason}" + (
                f": {message}" if message else ""
            )
    return ""


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


FAIL = "fail"  # the user's doing: the job fails
RETRY = "retry"  # a failed start: requeued with backoff, failed after the job's own cap


def _waiting(
    pods: list[Obj], since: datetime | None, now: datetime, pull_timeout: timedelta
) -> tuple[str, str]:
    """(verdict, sentence) for workers that are not running yet: the verdict is FAIL, RETRY,
    or "" while waiting is still right. An image that cannot be pulled past the timeout and a
    container the runtime cannot create past CREATE_GRACE are failed starts (a registry or a
    node may be at fault, and the next try may land elsewhere); a bad image name or a
    container configuration that names what does not exist is the job's own."""
    for pod in sorted(pods, key=_rank):
        waiting = _worker_state(pod).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in PERMANENT_WAITS:
            return FAIL, f"worker {_rank(pod)}: {reason}: {waiting.get('message', '')}".rstrip(": ")
        if reason in TRANSIENT_WAITS:
            status = pod.get("status") or {}
            started = parse_time(status.get("startTime")) or since
            late = started is not None and now - started >= CREATE_GRACE
            message = f"worker {_rank(pod)}: {reason}: {waiting.get('message', '')}"
            return (RETRY if late else ""), message.rstrip(": ")
        if reason in PULL_FAILURES:
            started = parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or since
            late = started is not None and now - started >= pull_timeout
            message = (
                f"worker {_rank(pod)}: image pull failed ({reason}): {waiting.get('message', '')}"
            )
            return (RETRY if late else ""), message.rstrip(": ")
    for pod in sorted(pods, key=_rank):
        scheduled = _condition(pod, "PodScheduled")
        if (pod.get("status") or {}).get("phase") == "Pending" and scheduled is None:
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition.get("type") == "PodScheduled" and condition.get("message"):
                    return "", f"worker {_rank(pod)} unschedulable: {condition['message']}"
    return "", ""


def _unplaceable(pods: list[Obj], now: datetime) -> str:
    """A released worker that kube-scheduler has not been able to bind to its planned node for
    UNSCHEDULABLE_GRACE (something took the room after the release): the gang would sit
    half-bound, so it is a failed start. Within the grace it waits."""
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
                since = parse_time(condition.get("lastTransitionTime"))
                if since is not None and now - since < UNSCHEDULABLE_GRACE:
                    continue
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

    1. Refused by its node: a worker the kubelet refused or dropped (NODE_REFUSALS) is a lost
       gang, even once the Job failed for it: the node's fault, not the job's. One evicted for
       exceeding its own limits (ephemeral storage) fails the job: requeued, it would be
       evicted again.
    2. Finished: the Job's Complete or Failed condition (with the failing worker's exit code
       and reason, e.g. OOMKilled, or the Job's own reason, e.g. DeadlineExceeded).
    3. Lost: a worker's node is gone, or not ready for longer than the grace, or the worker
       was disrupted or evicted.
    4. A failed start: the caller's `start_problem`, a released worker that cannot be bound,
       an image that cannot be pulled (after the timeout) or a container the runtime cannot
       create (after CREATE_GRACE).
    5. Failed without the Job knowing yet: a worker that exited non-zero, or a container
       configuration that cannot work (InvalidImageName, CreateContainerConfigError).
    6. Running once every worker runs; starting until then, saying what holds it back.
    """
    key = key or attempt_of(job)
    assert key is not None, "only gpuqueue Jobs have a workload status"
    job_id, attempt = key
    pods = list(pods)
    workers = int((job.get("spec") or {}).get("parallelism") or 1)
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp")) or first_seen
    status = job.get("status") or {}

    # 1. Refused by its node (evicted for its own limits: the job's failure)
    if own := _evicted_over_own_limit(pods):
        return WorkloadStatus(job_id, attempt, Phase.FAILED, now, message=own)
    if refused := _refused_by_node(pods):
        return WorkloadStatus(job_id, attempt, Phase.LOST, now, message=refused)
    # 2. Finished
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
    # 3. Lost
    if lost := _lost(pods, nodes, now, node_lost_grace):
        return WorkloadStatus(job_id, attempt, Phase.LOST, now, message=lost)
    # 4. A failed start
    verdict, message = _waiting(pods, created, now, pull_timeout)
    code, exited = _failed_worker(pods)
    problem = start_problem or _unplaceable(pods, now) or (message if verdict == RETRY else "")
    if problem and not exited:
        return WorkloadStatus(job_id, attempt, Phase.LOST, now, message=problem, start_failure=True)
    # 5. Failed before the Job controller noticed (it never does for a stuck container).
    if exited:
        return WorkloadStatus(job_id, attempt, Phase.FAILED, now, exit_code=code, message=exited)
    if verdict == FAIL:
        return WorkloadStatus(job_id, attempt, Phase.FAILED, now, message=message)
    # 6. Running or starting
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
