"""What the database recorded about what gpuqueue made: the install's identity and, per
launched attempt, the proof its objects are checked against (gpuqueue.cluster.proof).

The records are written by the launch (gpuqueue/cycle/launch.py); the backend only reads them,
except for the install's identity, written once, at the first start of a Kubernetes backend.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection

from django.conf import settings
from django.db import IntegrityError, transaction

from gpuqueue.cluster.base import ClusterError
from gpuqueue.cluster.proof import Key, Record, attempt_proof, install_key
from gpuqueue.core.states import JobState
from gpuqueue.models import Install, JobSource, WorkloadRecord


def proof_of(record: WorkloadRecord, instance: str) -> str:
    """The HMAC every object of the record's attempt carries."""
    key = install_key(settings.SECRET_KEY, instance)
    return attempt_proof(
        key, record.namespace, record.job_id, record.attempt, instance, record.nonce
    )


def recorded(job_ids: Collection[int], instance: str) -> dict[Key, Record]:
    """The records of every attempt of these jobs (one query)."""
    if not job_ids:
        return {}
    ids = sorted(set(job_ids))
    # Jobs that mirror a user's Job: every attempt's workload is that Job, proven by the
    # name and uid recorded when it was mirrored (one more query).
    sources = {
        source.job_id: (source.name, source.uid, state == JobState.CANCELLED, source.kind)
        for source, state in (
            (s, s.job.state) for s in JobSource.objects.filter(job_id__in=ids).select_related("job")
        )
    }
    out = {}
    for row in WorkloadRecord.objects.filter(job_id__in=ids):
        name, uid, cancelled, kind = sources.get(row.job_id, ("", row.job_uid, False, ""))
        out[(row.job_id, row.attempt)] = Record(
            namespace=row.namespace,
            proof=proof_of(row, instance),
            secret_uid=row.secret_uid,
            job_uid=uid,
            source=name,
            source_kind=kind,
            cancelled=cancelled,
        )
    return out


def this_install(instance: str) -> Install:
    """The install this database belongs to; recorded at the first start. A database that
    belongs to another instance refuses to serve this one: its records' proofs name the other
    instance, and its objects carry the other's label."""
    try:
        with transaction.atomic():
            install, _ = Install.objects.get_or_create(
                pk=1, defaults={"instance": instance, "uid": uuid.uuid4()}
            )
    except IntegrityError:  # another process recorded it first
        install = Install.objects.get(pk=1)
    if install.instance != instance:
        raise ClusterError(
            f"this database belongs to the gpuqueue install {install.instance!r}, not to"
            f" GPUQUEUE_INSTANCE={instance!r}: an install keeps its instance for life (its"
            " objects on the cluster carry it); set GPUQUEUE_INSTANCE back, or give the new"
            " install a database of its own",
            transient=False,
        )
    return install
