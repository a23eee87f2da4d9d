"""Turn admitted jobs into backend calls, after the admission has been committed."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from gpuqueue.cluster import dra_sharing, get_backend
from gpuqueue.cluster.base import ClusterBackend, ClusterError, Launched, LaunchSpec, Squatted
from gpuqueue.cluster.records import proof_of
from gpuqueue.core import fabric
from gpuqueue.core.locks import shared_session_lock
from gpuqueue.core.states import JobState
from gpuqueue.models import Flavor, Job, JobSource, WorkloadRecord
from gpuqueue.services.jobs import pod_spec
from gpuqueue.services.jobs.start_failures import requeue_after_start_failure
from gpuqueue.services.jobs.transitions import Move, move_jobs
from teams.models import Team
from teams.services import hash_secret

log = logging.getLogger(__name__)


class AdmittedJob(NamedTuple):
    """What a launch reads of an admitted job: the columns `launch_spec`, `workload_records`
    and `still_allowed` use, named as the Job's fields, and its team and flavor. A wave
    launches thousands of jobs at once, and full model instances (every column, each JSON
    field decoded, a team and a flavor instance per job) took about half of its launch."""

    id: int
    state: str
    attempts: int
    team_id: int
    flavor_id: int
    name: str
    image: str
    command: list[Any]
    env: dict[str, Any]
    labels: dict[str, Any]
    annotations: dict[str, Any]
    workers: int
    gpus_per_worker: int
    gpu_milli: int
    gpu_models: list[str]
    gpu_devices: list[Any]
    placement: dict[str, Any]
    pod_nodes: list[str] | None
    checkpoint_grace_seconds: int
    max_runtime_seconds: int | None
    checkpoint_location: str
    expected_runtime_seconds: int | None
    cpu_millicores: int | None
    memory_mib: int | None
    cpu_limit_millicores: int | None
    memory_limit_mib: int | None
    shm_mib: int | None
    volumes: list[Any]
    image_pull_secrets: list[Any]
    env_from_secrets: list[Any]
    priority_class: str
    service_account: str
    team: Team
    flavor: Flavor

    @property
    def pk(self) -> int:
        return self.id


_COLUMNS = AdmittedJob._fields[: AdmittedJob._fields.index("team")]


def admitted_jobs(job_ids: Sequence[int]) -> list[AdmittedJob]:
    """The jobs of `job_ids` still ADMITTED, in one query of the columns a launch uses; their
    teams and flavors (a few) read once each."""
    rows = list(
        Job.objects.filter(pk__any=list(job_ids), state=JobState.ADMITTED)
        .order_by("pk")
        .values_list(*_COLUMNS)
    )
    team_at, flavor_at = _COLUMNS.index("team_id"), _COLUMNS.index("flavor_id")
    teams = Team.objects.in_bulk({row[team_at] for row in rows})
    flavors = Flavor.objects.in_bulk({row[flavor_at] for row in rows})
    return [AdmittedJob._make((*row, teams[row[team_at]], flavors[row[flavor_at]])) for row in rows]


def workload_records(jobs: Sequence[Job | AdmittedJob]) -> dict[int, WorkloadRecord]:
    """The record of each job's current attempt, {job id: record}, made before its first
    launch: the namespace it is launched in and a random nonce, which the proof on every
    object of the attempt covers. A relaunch of the same attempt finds the same record, so it
    adopts what the first launch made; a new attempt gets a new one. Two statements (a third
    for the rare attempt another process recorded meanwhile), each with one parameter per
    column: a wave launches thousands of jobs at once."""
    wanted = {(job.pk, job.attempts): job for job in jobs}
    ids = [job.pk for job in jobs]
    now = timezone.now()
    found = {
        (r.job_id, r.attempt): r
        for r in WorkloadRecord.objects.filter(job_id__any=ids)
        if (r.job_id, r.attempt) in wanted
    }
    missing = [
        WorkloadRecord(
            job_id=job.pk,
            attempt=job.attempts,
            namespace=job.team.namespace,
            nonce=secrets.token_hex(16),
            created_at=now,
        )
        for key, job in wanted.items()
        if key not in found
    ]
    if missing:
        made = _insert_records(missing)
        for record in missing:
            pk = made.get((record.job_id, record.attempt))
            if pk is not None:
                record.pk = pk
                record._state.adding = False
                found[record.job_id, record.attempt] = record
        if len(made) < len(missing):
            # Another process launching the same attempt at once: its row wins, and is read.
            found.update(
                ((r.job_id, r.attempt), r)
                for r in WorkloadRecord.objects.filter(job_id__any=ids)
                if (r.job_id, r.attempt) in wanted and (r.job_id, r.attempt) not in found
            )
    return {key[0]: record for key, record in found.items()}


def _insert_records(records: list[WorkloadRecord]) -> dict[tuple[int, int], int]:
    """INSERT the records from one array per column (in binary: as text, each element is
    escaped by a regular expression), leaving any attempt already recorded as it is; {(job id,
    attempt): id} of those inserted."""
    table = connection.ops.quote_name(WorkloadRecord._meta.db_table)
    sql = (
        f"INSERT INTO {table} (job_id, attempt, namespace, nonce, secret_uid, job_uid, "
        "created_at) SELECT j, a, ns, n, '', '', %s FROM unnest(%b::bigint[], %b::int[], "
        "%b::text[], %b::text[]) AS r (j, a, ns, n) ON CONFLICT DO NOTHING "
        "RETURNING job_id, attempt, id"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            [
                records[0].created_at,  # one time for all
                [r.job_id for r in records],
                [r.attempt for r in records],
                [r.namespace for r in records],
                [r.nonce for r in records],
            ],
        )
        return {(job_id, attempt): pk for job_id, attempt, pk in cursor.fetchall()}


def launch_spec(
    job: Job | AdmittedJob, record: WorkloadRecord | None = None, source: JobSource | None = None
) -> LaunchSpec:
    """What the backend needs to launch the job's current attempt, in the namespace its record
    names, with the proof its objects carry (the record is made here when none is given), and
    the user's Job it admits when it mirrors one (`source`: the caller reads them in bulk)."""
    record = record or workload_records([job])[job.pk]
    flavor = job.flavor
    requests = pod_spec.worker_requests(
        job.cpu_millicores,
        job.memory_mib,
        job.gpus_per_worker,
        (flavor.cpu_millicores_per_gpu, flavor.memory_mib_per_gpu),
    )
    env = {str(k): str(v) for k, v in job.env.items()}
    if job.attempts > 1:
        # A requeued job resumes: tell it which attempt this is and where it saved.
        env.update(
            GPUQUEUE_RESUME="1",
            GPUQUEUE_ATTEMPT=str(job.attempts),
            GPUQUEUE_CHECKPOINT=job.checkpoint_location,
        )
    return LaunchSpec(
        job_id=job.pk,
        attempt=job.attempts,
        team=job.team.slug,
        namespace=record.namespace,
        name=job.name,
        image=job.image,
        command=list(job.command),
        env=env,
        labels={str(k): str(v) for k, v in job.labels.items()},
        annotations={str(k): str(v) for k, v in job.annotations.items()},
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
        resource_name=job.flavor.resource_name,
        placement={str(k): int(v) for k, v in job.placement.items()},
        pod_nodes=tuple(str(node) for node in job.pod_nodes or ()),
        checkpoint_grace_seconds=job.checkpoint_grace_seconds,
        max_runtime_seconds=job.max_runtime_seconds,
        checkpoint_location=job.checkpoint_location,
        expected_runtime_seconds=job.expected_runtime_seconds,
        tolerations=tuple(
            {str(k): str(v) for k, v in toleration.items()} for toleration in job.flavor.tolerations
        ),
        cpu_millicores=requests[0],
        memory_mib=requests[1],
        cpu_limit_millicores=job.cpu_limit_millicores or 0,
        memory_limit_mib=job.memory_limit_mib,
        shm_mib=job.shm_mib,
        run_as_user=job.flavor.run_as_user,
        run_as_group=job.flavor.run_as_group,
        fs_group=job.flavor.fs_group,
        allow_root=job.flavor.allow_root,
        fabric=fabric.parse(job.flavor.fabric),
        volumes=tuple(
            {
                "claim": str(v["claim"]),
                "mount_path": str(v["mount_path"]),
                "read_only": bool(v.get("read_only")),
            }
            for v in job.volumes
        ),
        image_pull_secrets=tuple(str(name) for name in job.image_pull_secrets),
        env_from_secrets=tuple(str(name) for name in job.env_from_secrets),
        priority_class=job.priority_class,
        service_account=job.service_account,
        instance=settings.GPUQUEUE_INSTANCE,
        proof=proof_of(record, settings.GPUQUEUE_INSTANCE),
        resource_count=pod_spec.resource_per_worker(job, flavor),
        gpu_models=tuple(job.gpu_models),
        device_class=flavor.device_class,
        device_selector=flavor.device_selector,
        **_shared_claim(job, flavor),
        source=source.name if source is not None else "",
        source_uid=source.uid if source is not None else "",
        source_kind=source.kind if source is not None else "",
    )


def _shared_claim(job: Job | AdmittedJob, flavor: Flavor) -> dict[str, Any]:
    """A fraction of a shared DRA flavor's GPU: the claim of the GPU it was packed on (its one
    worker's [node, GPU index]), and how the flavor shares it (gpuqueue.cluster.dra_sharing)."""
    if not (flavor.device_class and flavor.shareable and job.gpu_milli and job.gpu_devices):
        return {}
    node, index = str(job.gpu_devices[0][0]), int(job.gpu_devices[0][1])
    return {
        "shared_claim": dra_sharing.claim_name(flavor.name, node, index),
        "shared_gpu": (node, index),
        "sharing_strategy": flavor.sharing_strategy,
    }


def still_allowed(jobs: list[AdmittedJob]) -> list[AdmittedJob]:
    """The jobs whose ServiceAccount, Secrets and claims their team still allows; the others
    fail with what is no longer allowed. Submission checked the lists, but a team admin may
    have taken a name off since (a leaked Secret, a claim handed to another project): what a
    job uses is the team's to say when its pods are made, not only when it was queued."""
    kept = []
    for job in jobs:
        refused = pod_spec.namespace_errors(
            job.team, {field: getattr(job, field) for field in pod_spec.NAMESPACE_FIELDS}
        )
        if not refused:
            kept.append(job)
            continue
        cause = "no longer allowed by its team: " + " ".join(
            message for messages in refused.values() for message in messages
        )
        _fail(job, cause, "gpuqueue", cause)
    return kept


def _fail(job: AdmittedJob, cause: str, actor: str, message: str) -> None:
    """FAILED through the door, from the state the launch read it in (a job another process
    moved since is left alone)."""
    move_jobs(
        [Move(job.id, job.state)],
        JobState.FAILED,
        reason=cause,
        actor=actor,
        changes={"message": message, "finished_at": timezone.now()},
    )


def launch_admitted(job_ids: list[int], backend: ClusterBackend | None = None) -> None:
    """Launch each admitted job.

    1. Read the jobs, fail those that name what their team no longer allows (`still_allowed`),
       make the record of each one's attempt (namespace and nonce: what its
       proof covers) and build their launch specs (this thread: the database).
    2. Call the backend (`ClusterBackend.launch_all`: in bulk where it can, else up to its
       `launch_concurrency` at once), holding the shared "launching" lock.
    3. Keep the uids of what each launch made in its record (what the sync believes
       afterwards; still under the lock), then the hash of each token the workloads were
       given, in bulk updates. A launch that found another's object under its attempt's name
       (Squatted) is a failed start: requeued with backoff, to a new attempt and new names.
       Fail each job whose manifest the cluster refused, or whose launch raised anything
       else, with the error. A transient failure leaves the job ADMITTED for the next sync to
       retry.
    """
    backend = backend or get_backend()
    # 1.
    jobs = still_allowed(admitted_jobs(job_ids))
    records = workload_records(jobs)
    ids = [job.pk for job in jobs]
    sources = {s.job_id: s for s in JobSource.objects.filter(job__pk__any=ids)}
    specs = [launch_spec(job, records[job.pk], sources.get(job.pk)) for job in jobs]

    # 2. Under the shared "launching" lock: the cluster sync leaves admitted jobs without a
    # workload to a launch in progress instead of launching them a second time.
    with shared_session_lock("launching"):
        outcomes = backend.launch_all(specs)
        # The uids of what each launch made, recorded before the lock goes: a sync that finds
        # the lock free takes a recorded Job for made, even before its copy of the cluster
        # shows it (cluster_sync._not_made).
        made = []
        for job, outcome in zip(jobs, outcomes, strict=True):
            if isinstance(outcome, Launched):
                record = records[job.pk]
                record.secret_uid, record.job_uid = outcome.secret_uid, outcome.job_uid
                made.append(record)
        WorkloadRecord.objects.bulk_update(made, ["secret_uid", "job_uid"], batch_size=500)
    # 3.
    with_token = []
    for job, outcome in zip(jobs, outcomes, strict=True):
        if isinstance(outcome, Launched):
            outcome = outcome.token
        if isinstance(outcome, str):
            with_token.append(Job(pk=job.pk, checkpoint_token_hash=hash_secret(outcome)))
        elif isinstance(outcome, Squatted):
            log.warning("launch of job %s: %s", job.pk, outcome)
            # A model instance for the requeue, which reads the job's start failures; none
            # when another process moved the job since the launch read it.
            instance = Job.objects.filter(pk=job.id, state=job.state).first()
            if instance is not None:
                with transaction.atomic():
                    requeue_after_start_failure(
                        instance, str(outcome), timezone.now(), actor="cluster"
                    )
        elif isinstance(outcome, ClusterError) and outcome.transient:
            log.warning("launch of job %s deferred: %s", job.pk, outcome)
        elif isinstance(outcome, Exception):
            # Refused by the cluster, or a launch that raised (a bug, a value out of range):
            # this job fails with the error, the others go on.
            if isinstance(outcome, ClusterError):
                cause = f"the cluster refused the job: {outcome}"
            else:
                log.error("launch of job %s failed", job.pk, exc_info=outcome)
                cause = f"launch failed: {type(outcome).__name__}: {outcome}"
            _fail(
                job, cause, "cluster", str(outcome) if isinstance(outcome, ClusterError) else cause
            )
    Job.objects.bulk_update(with_token, ["checkpoint_token_hash"], batch_size=500)
