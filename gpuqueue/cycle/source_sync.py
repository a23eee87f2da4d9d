"""Follow the users' own labelled Jobs (gpuqueue.cluster.sources), PyTorchJobs and RayJobs
(gpuqueue.cluster.frameworks) in the cluster sync.

1. List the objects with the queue label in every team namespace the backend can read.
2. A labelled, suspended Job no job mirrors yet becomes a PENDING job
   (gpuqueue.services.jobs.sources.mirror), or is told why not; one that is not suspended was
   never gpuqueue's to hold (the admission policy refuses such a Job: it predates the policy)
   and is only told so.
3. A job whose Job is gone from a namespace that was read is cancelled.
4. Every listed Job whose status annotation no longer says where its job stands gets the new
   sentence, as an annotation and an Event, after the caller's commit (`Describe`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuqueue.cluster import frameworks
from gpuqueue.cluster.base import ClusterBackend
from gpuqueue.cluster.sources import KIND_JOB, SourceShape, is_suspended, read_job, status_of
from gpuqueue.core.reason_text import describe_reason
from gpuqueue.core.states import ACTIVE, JobState
from gpuqueue.models import Job, JobSource
from gpuqueue.services.jobs.sources import cancel_gone, mirror

NOT_QUEUED = "not queued: "


@dataclass(frozen=True, slots=True)
class Describe:
    namespace: str
    name: str
    uid: str
    job_id: int | None
    text: str
    kind: str = KIND_JOB

    def apply(self, backend: ClusterBackend) -> None:
        backend.describe_source(
            self.namespace, self.name, self.uid, self.job_id, self.text, self.kind
        )


def _suspended(obj: Mapping[str, Any]) -> bool:
    if frameworks.kind_of(obj) in frameworks.KINDS:
        return frameworks.is_suspended(obj)
    return is_suspended(obj)


def _read(obj: Mapping[str, Any]) -> SourceShape | str:
    if frameworks.kind_of(obj) in frameworks.KINDS:
        return frameworks.read_framework(obj)
    return read_job(obj)


def status_text(job: Job) -> str:
    """Where the job stands, in one sentence for the object it mirrors."""
    state = JobState(job.state)
    if state == JobState.PENDING:
        where = (
            f" (position {job.queue_position} in its team's queue)" if job.queue_position else ""
        )
        start = (
            f"; estimated start {job.estimated_start:%Y-%m-%d %H:%M} UTC"
            if job.estimated_start
            else ""
        )
        return (
            f"waiting in gpuqueue job {job.pk}{where}: {describe_reason(job.pending_reason)}{start}"
        )
    if state == JobState.ADMITTED:
        nodes = ", ".join(f"{node} ({n})" for node, n in sorted(job.placement.items()))
        return f"admitted by gpuqueue job {job.pk} to {nodes}"
    if state == JobState.RUNNING:
        return f"running as gpuqueue job {job.pk}"
    if state == JobState.PREEMPTING:
        return f"preempted (gpuqueue job {job.pk}): stopping, then back in the queue"
    if state == JobState.CANCELLED:
        return f"gpuqueue job {job.pk} was cancelled"
    return f"gpuqueue job {job.pk} {state.value.lower()}"


def sync_sources(backend: ClusterBackend) -> list[Describe]:
    """Steps 1–3 of the module's docstring (the caller holds the sync's lock, in a
    transaction); returns step 4's writes, for after the commit."""
    listed = backend.list_sources()  # 1.
    if listed is None:
        return []
    unseen = set(backend.unseen_source_namespaces())
    by_uid: dict[str, Mapping[str, Any]] = {}
    for obj in listed:
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if uid:
            by_uid[uid] = obj
    known = {
        s.uid: s for s in JobSource.objects.filter(uid__any=list(by_uid)).select_related("job")
    }
    out: list[Describe] = []
    for uid, obj in by_uid.items():
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        told = status_of(obj)
        source = known.get(uid)
        if source is not None:  # 4.
            text, job_id = status_text(source.job), source.job_id
        elif told.startswith(NOT_QUEUED):
            continue  # refused before: its spec cannot change, and it was told why
        elif not _suspended(obj):  # 2.
            text = NOT_QUEUED + "it was not created suspended"
            job_id = None
        else:
            shape = _read(obj)
            if isinstance(shape, str):
                text, job_id = NOT_QUEUED + shape, None
            else:
                mirrored = mirror(shape)
                job_id = mirrored.job.pk if mirrored.job is not None else None
                text = mirrored.text if job_id is not None else NOT_QUEUED + mirrored.text
                if mirrored.job is not None:
                    text = status_text(mirrored.job)
        if text != told:
            kind = frameworks.kind_of(obj) or KIND_JOB
            out.append(Describe(namespace, name, uid, job_id, text, kind))
    gone = (
        JobSource.objects.filter(job__state__in=[s.value for s in ACTIVE])
        .exclude(uid__in=list(by_uid))
        .exclude(namespace__in=sorted(unseen))
        .select_related("job")
    )
    for source in gone:  # 3.
        cancel_gone(source.job, source)
    return out
