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
from gpuqueue.cluster.proof import Key, Record, attempt_proof, install_key, shared_claim_proof
from gpuqueue.core.states import JobState
from gpuqueue.models import Install, JobSource, WorkloadRecord


def proof_of(record: WorkloadRecord, instance: str) -> str:
    """The HMAC every object of the record's attempt carries."""
    key = install_key(settings.SECRET_KEY, instance)
    return attempt_proof(
        key, record.namespace, record.job_id, record.attempt, instance, record.nonce
    )


def shared_claim_proof_of(namespace: str, name: str, instance: str) -> str:
    """The HMAC a shared GPU's ResourceClaim carries (gpuqueue.cluster.dra_sharing)."""
    return shared_claim_proof(install_key(settings.SECRET_KEY, instance), namespace, name, instance)


def recorded(job_ids: Collection[int], instance: str) -> dict[Key, Record]:
    """The records of every attempt of these jobs (two queries). Read as tuples, not model
    instances: every sync pass reads the records of every job that holds GPUs."""
    if not job_ids:
        return {}
    ids = sorted(set(job_ids))
    # Jobs that mirror a user's Job: every attempt's workload is that Job, proven by the
    # name and uid recorded when it was mirrored.
    sources = {
        job_id: (name, uid, state == JobState.CANCELLED, kind)
        for job_id, name, uid, state, kind in JobSource.objects.filter(
            job__pk__any=ids
        ).values_list("job_id", "name", "uid", "job__state", "kind")
    }
    key = install_key(settings.SECRET_KEY, instance)
    out = {}
    rows = WorkloadRecord.objects.filter(job_id__any=ids).values_list(
        "job_id", "attempt", "namespace", "nonce", "secret_uid", "job_uid"
    )
    for job_id, attempt, namespace, nonce, secret_uid, job_uid in rows:
        name, uid, cancelled, kind = sources.get(job_id, ("", job_uid, False, ""))
        out[(job_id, attempt)] = Record(
            namespace=namespace,
            proof=attempt_proof(key, namespace, job_id, attempt, instance, nonce),
            secret_uid=secret_uid,
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
