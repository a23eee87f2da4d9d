"""Pure: which listed objects gpuqueue made, proven against what the database recorded at launch.

Labels are hints: anyone who may create a pod or a Job in any namespace can write
`managed-by=gpuqueue, job-id=7, attempt=1`. What gpuqueue believes about an attempt comes only
from objects it can prove it made, against the attempt's `Record` (a WorkloadRecord row: the
namespace, a random nonce, and the uids the API gave the attempt's Secret and Job):

1. A Job counts for an attempt only in the namespace recorded for it, under the attempt's name,
   with the uid recorded at launch and owned (ownerReference) by the Secret uid recorded at
   launch. Until the launch's uids are recorded (a launch in flight, or cut short by a crash)
   the Job must carry the attempt's HMAC instead and be owned by the attempt's Secret.
2. A pod counts only for the Job that is its controller (an ownerReference with
   `controller: true` to a proven Job's uid, in that Job's namespace), and only when it also
   carries that attempt's labels (the Job controller copies them from the template; the
   admission policy keeps `gpuqueue.dev/*` labels off pods anyone else makes, so an
   ownerReference written by hand on someone's own pod does not make it a worker).
3. An object a relaunch finds already there (409) is adopted only when it carries the attempt's
   HMAC (PROOF_ANNOTATION) or the uid recorded for it. The HMAC is keyed by a secret of the
   install (`install_key`) over the namespace, the job, the attempt, the instance and the
   record's nonce: no tenant can compute it, and one copied from another object names another
   attempt.
4. A user's own Job that a job mirrors (gpuqueue.cluster.sources) counts for an attempt only
   in the namespace and under the name recorded when it was mirrored, with the uid recorded
   then; while it is suspended (waiting in the queue, or stopped by a preemption) it is no
   attempt's workload. A user's PyTorchJob or RayJob (gpuqueue.cluster.frameworks) counts the
   same way; its pods count by rule 2 with the PyTorchJob (by uid), or the RayCluster its
   RayJob names in its status (by name), as their controller.
5. Jobs labelled as this install's that no record proves are `unproven`: they never make a
   status, never count as a live job's, and are never deleted as orphans (a database restored
   from a backup has no record of what was launched after the backup).
6. The ResourceClaim that the sharers of one GPU of a shared DRA flavor name
   (gpuqueue.cluster.dra_sharing) serves several attempts: it is proven by its namespace, its
   name and an HMAC over both (keyed as above), and belongs to an attempt only while that
   attempt's Secret is one of its owners.

No I/O, no Django: the input is the API's JSON and the records.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuqueue.cluster.manifests import (
    MANAGED_BY,
    MANAGED_BY_VALUE,
    PROOF_ANNOTATION,
    attempt_of,
    claim_template_name,
    token_secret_name,
    workload_name,
)

Obj = Mapping[str, Any]
Key = tuple[int, int]  # (job id, attempt)
# The ConfigMap in each team namespace that names the install owning it: data `instance`
# (GPUQUEUE_INSTANCE) and `install` (the uid of the install's database).
MARKER = "gpuqueue-install"


@dataclass(frozen=True, slots=True)
class Record:
    """What the database recorded for one attempt (gpuqueue.models.WorkloadRecord)."""

    namespace: str
    proof: str  # the HMAC every object of the attempt carries
    secret_uid: str = ""  # "" until the launch returned
    job_uid: str = ""
    # A user's Job the job mirrors (rule 4): its name ("": gpuqueue's own Job), and whether the
    # job was cancelled (then stopping it deletes it; otherwise stopping it suspends it).
    source: str = ""
    cancelled: bool = False
    source_kind: str = ""  # the source's kind: "Job", "PyTorchJob" or "RayJob"


def install_key(secret_key: str, instance: str) -> bytes:
    """The install's key for the proof: derived from its SECRET_KEY (never sent anywhere) and
    bound to its instance, so two installs sharing a SECRET_KEY still prove different things."""
    return hmac.new(
        secret_key.encode(), f"gpuqueue workload proof\n{instance}".encode(), hashlib.sha256
    ).digest()


def attempt_proof(
    key: bytes, namespace: str, job_id: int, attempt: int, instance: str, nonce: str
) -> str:
    message = "\n".join((namespace, str(job_id), str(attempt), instance, nonce))
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def shared_claim_proof(key: bytes, namespace: str, name: str, instance: str) -> str:
    """The HMAC of a shared GPU's ResourceClaim (gpuqueue.cluster.dra_sharing): it serves many
    attempts, so it is bound to its namespace and name rather than to one attempt."""
    message = "\n".join(("shared GPU claim", namespace, name, instance))
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def carries(obj: Obj, proof: str) -> bool:
    """The object carries the attempt's HMAC."""
    found = str((_meta(obj).get("annotations") or {}).get(PROOF_ANNOTATION) or "")
    return bool(proof) and hmac.compare_digest(found.encode(), proof.encode())


def owned_by(
    obj: Obj, kind: str, *, uid: str = "", name: str = "", controller: bool = False
) -> bool:
    """One of the object's ownerReferences is of `kind`, with `uid` (and `name`) when given,
    and is its controller when `controller`."""
    for ref in _meta(obj).get("ownerReferences") or []:
        if (
            ref.get("kind") == kind
            and (not uid or ref.get("uid") == uid)
            and (not name or ref.get("name") == name)
            and (not controller or ref.get("controller") is True)
        ):
            return True
    return False


def _in_place(obj: Obj, record: Record, name: str) -> bool:
    meta = _meta(obj)
    return meta.get("namespace") == record.namespace and meta.get("name") == name


def is_our_secret(secret: Obj, key: Key, record: Record) -> bool:
    """The attempt's token Secret: its recorded uid, or (not recorded yet) its HMAC."""
    if not _in_place(secret, record, token_secret_name(*key)):
        return False
    if record.secret_uid:
        return _meta(secret).get("uid") == record.secret_uid
    return carries(secret, record.proof)


def is_our_job(job: Obj, key: Key, record: Record, secret_uid: str = "") -> bool:
    """The attempt's Job (rule 1). `secret_uid`: the owner to require when the record has none
    yet (a relaunch that just adopted or created the Secret)."""
    if record.source:
        return (
            _in_place(job, record, record.source)
            and bool(record.job_uid)
            and _meta(job).get("uid") == record.job_uid
        )
    if not _in_place(job, record, workload_name(*key)):
        return False
    owner = record.secret_uid or secret_uid
    if not owned_by(job, "Secret", uid=owner, name=token_secret_name(*key)):
        return False
    if record.job_uid:
        return _meta(job).get("uid") == record.job_uid
    return carries(job, record.proof)


def is_our_service(service: Obj, key: Key, record: Record, secret_uid: str) -> bool:
    """The attempt's headless Service: its HMAC, and owned by the attempt's Secret."""
    return (
        _in_place(service, record, workload_name(*key))
        and carries(service, record.proof)
        and owned_by(service, "Secret", uid=secret_uid)
    )


def is_our_pod_group(group: Obj, key: Key, record: Record, secret_uid: str) -> bool:
    """The gang's PodGroup (Kubernetes 1.37): proven as the Service is."""
    return (
        _in_place(group, record, workload_name(*key))
        and carries(group, record.proof)
        and owned_by(group, "Secret", uid=secret_uid)
    )


def is_our_claim_template(template: Obj, key: Key, record: Record, secret_uid: str) -> bool:
    """The attempt's ResourceClaimTemplate (a DRA flavor's devices): proven as the Service is,
    by its name, the attempt's HMAC and its owner, the attempt's Secret. Only such a template
    is adopted by a relaunch or deleted by a stop: one a tenant made under that name could ask
    devices of any class."""
    return (
        _in_place(template, record, claim_template_name(*key))
        and carries(template, record.proof)
        and owned_by(template, "Secret", uid=secret_uid)
    )


def is_our_shared_claim(claim: Obj, namespace: str, name: str, proof: str) -> bool:
    """A shared GPU's ResourceClaim (6.): in its namespace, under its name, with the HMAC
    bound to both. Only such a claim is joined by a launch, or left or deleted by a stop: one
    a tenant made under that name could ask any device, with any configuration."""
    meta = _meta(claim)
    return meta.get("namespace") == namespace and meta.get("name") == name and carries(claim, proof)


def is_worker(pod: Obj, key: Key, namespace: str, job_uid: str, source: str = "") -> bool:
    """The pod is a worker of attempt `key` (rule 2): in the attempt's namespace, its controller
    the Job (or a user's PyTorchJob) with `job_uid`, and carrying the attempt's labels; or, for
    a user's RayJob named `source`, a RayCluster KubeRay named after it."""
    if not (bool(job_uid) and _meta(pod).get("namespace") == namespace):
        return False
    if attempt_of(pod) != key:
        return False
    if owned_by(pod, "Job", uid=job_uid, controller=True):
        return True
    if owned_by(pod, "PyTorchJob", uid=job_uid, controller=True):
        return True
    return bool(source) and any(
        ref.get("kind") == "RayCluster"
        and ref.get("controller") is True
        and is_ray_cluster_of(str(ref.get("name") or ""), source)
        for ref in _meta(pod).get("ownerReferences") or []
    )


def is_ray_cluster_of(cluster: str, rayjob: str) -> bool:
    """`cluster` is a name KubeRay gives the RayCluster of RayJob `rayjob`: the RayJob's name,
    a dash and five lowercase letters or digits. Exactly that, so that the cluster of another
    RayJob whose name merely starts with `rayjob-` is not taken for this one's."""
    suffix = cluster.removeprefix(f"{rayjob}-")
    return (
        cluster != suffix
        and len(suffix) == 5
        and all(c.isascii() and (c.islower() or c.isdigit()) for c in suffix)
    )


@dataclass(frozen=True, slots=True)
class Ours:
    """The listed objects sorted out: what gpuqueue proves it made, by attempt."""

    jobs: Mapping[Key, Obj] = field(default_factory=dict)
    pods: Mapping[Key, Sequence[Obj]] = field(default_factory=dict)
    # (namespace, pod name) -> attempt, for every proven pod (also those of a deleted Job)
    pod_keys: Mapping[tuple[str, str], Key] = field(default_factory=dict)
    # Jobs labelled as gpuqueue's (and listed by this install's selector) that nothing proves,
    # each with why.
    unproven: Sequence[tuple[Obj, str]] = ()


def why_unproven(job: Obj, key: Key, record: Record | None) -> str:
    """Why a Job labelled as attempt `key` is not that attempt's, in a few words."""
    meta = _meta(job)
    if record is None:
        return (
            f"the database has no record of launching attempt {key[1]} of job {key[0]} (a"
            " database restored from an older backup, or another database under this"
            " install's name)"
        )
    if meta.get("namespace") != record.namespace:
        return f"attempt {key[1]} of job {key[0]} was launched in {record.namespace}"
    name = record.source or workload_name(*key)
    if meta.get("name") != name:
        return f"attempt {key[1]} of job {key[0]} is named {name}"
    if record.source:
        return "its uid is not the one recorded when gpuqueue mirrored the Job"
    if not owned_by(job, "Secret", uid=record.secret_uid, name=token_secret_name(*key)):
        return "it is not owned by the Secret gpuqueue made for the attempt"
    if record.job_uid:
        return "its uid is not the one recorded when gpuqueue launched the attempt"
    return "it does not carry the attempt's proof"


# The kinds that control a proven workload's pods: a Job (gpuqueue's, or a user's mirrored
# one), a user's PyTorchJob, and the RayCluster a user's RayJob made (gpuqueue.cluster.frameworks).
CONTROLLER_KINDS = ("Job", "PyTorchJob", "RayCluster")
# In a mirrored PyTorchJob's or RayJob's view (gpuqueue.cluster.frameworks.job_view): the
# controllers of its pods, as [kind, uid, name].
CONTROLLERS_KEY = "gpuqueue.dev/controllers"


def controllers_of(job: Obj) -> list[tuple[str, str, str]]:
    """Who controls the workload's pods: the Job itself, or what a framework's view names (a
    PyTorchJob by its uid; the RayCluster of a RayJob by the name its status gives, that
    cluster being the RayJob's own: the admission policy lets only KubeRay's operator make a
    RayCluster whose templates carry gpuqueue's labels, and only for a RayJob)."""
    named = job.get(CONTROLLERS_KEY)
    if named is not None:
        return [(str(k), str(u), str(n)) for k, u, n in named]
    uid = str(_meta(job).get("uid") or "")
    return [("Job", uid, "")] if uid else []


def sort_out(jobs: Iterable[Obj], pods: Iterable[Obj], records: Mapping[Key, Record]) -> Ours:
    """Which Jobs and pods are gpuqueue's, by attempt (rules 1, 2, 4 and 5)."""
    ours: dict[Key, Obj] = {}
    unproven: list[tuple[Obj, str]] = []
    for job in jobs:
        key = attempt_of(job)  # a hint: which record to check the Job against
        if key is None:
            continue
        record = records.get(key)
        if record is not None and is_our_job(job, key, record):
            if record.source and (job.get("spec") or {}).get("suspend"):
                continue  # a user's Job back in the queue: no workload (rule 4)
            ours[key] = job
        else:
            unproven.append((job, why_unproven(job, key, record)))
    owners: dict[tuple[str, ...], Key] = {}
    for key, job in ours.items():
        namespace = str(_meta(job).get("namespace") or "")
        for kind, uid, name in controllers_of(job):
            owners[(namespace, kind, uid) if uid else (namespace, kind, "", name)] = key
    # A stopped attempt's Job is deleted at once (background propagation) while its pods
    # terminate: they are still proven by the Job uid recorded at launch, for the inventory
    # (their GPUs come back), though they make no status.
    # (A user's Job serves every attempt of its job under one uid: by uid and attempt.)
    gone = {
        (record.namespace, record.job_uid, key): key
        for key, record in records.items()
        if record.job_uid and key not in ours
    }
    by_key: dict[Key, list[Obj]] = {key: [] for key in ours}
    pod_keys: dict[tuple[str, str], Key] = {}
    for pod in pods:
        meta = _meta(pod)
        namespace = str(meta.get("namespace") or "")
        for ref in meta.get("ownerReferences") or []:
            if ref.get("controller") is True and ref.get("kind") in CONTROLLER_KINDS:
                kind, uid = str(ref.get("kind")), str(ref.get("uid") or "")
                owner = (namespace, uid)
                key = owners.get((namespace, kind, uid))
                if key is None:
                    key = owners.get((namespace, kind, "", str(ref.get("name") or "")))
                if key is not None and attempt_of(pod) == key:
                    by_key[key].append(pod)
                    pod_keys[(namespace, str(meta.get("name") or ""))] = key
                elif (key := gone.get((*owner, attempt_of(pod)))) is not None:
                    pod_keys[(namespace, str(meta.get("name") or ""))] = key
                break
    return Ours(jobs=ours, pods=by_key, pod_keys=pod_keys, unproven=unproven)


def marker_refusal(marker: Obj, namespace: str, instance: str, install: str) -> str:
    """Why the namespace whose marker this is is not this install's ("" when it is).

    A marker carries gpuqueue's labels (which the admission policy keeps for gpuqueue's own
    ServiceAccount); a ConfigMap under its name without them was made by someone else, and
    claims the namespace for nobody. Either way the namespace is left out of this install:
    a namespace it cannot prove is its own is one it neither watches nor launches in."""
    meta = _meta(marker)
    if (meta.get("labels") or {}).get(MANAGED_BY) != MANAGED_BY_VALUE:
        return (
            f"namespace {namespace} holds a ConfigMap {namespace}/{MARKER} that is not an"
            " install's marker (it lacks gpuqueue's labels): someone else made it, and no"
            " gpuqueue install claims the namespace until it is deleted"
        )
    data = marker.get("data") or {}
    theirs = (str(data.get("instance", "")), str(data.get("install", "")))
    if theirs == (instance, install):
        return ""
    return (
        f"namespace {namespace} belongs to another gpuqueue install: its marker ConfigMap"
        f" {namespace}/{MARKER} names instance {theirs[0]!r} (database"
        f" {theirs[1] or 'unnamed'}), and this install is {instance!r} (database"
        f" {install or 'unnamed'}). Two installs on one namespace would read each other's"
        " workloads and delete each other's gangs as orphans, so this install refuses the"
        " namespace: it neither watches nor launches there. Give each install its own team"
        " namespaces; if the other install is gone for good, delete that ConfigMap and restart"
    )
