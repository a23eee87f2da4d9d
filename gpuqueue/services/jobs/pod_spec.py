"""The rules of what a job asks of its pods besides GPUs: CPU, memory and /dev/shm per worker,
the team's PersistentVolumeClaims, Secrets by name, a priority class and a ServiceAccount.

Names are checked by Kubernetes' syntax (DNS-1123 subdomains) so that the cluster never refuses
a job gpuqueue accepted, and against the team's allow-lists, which its admins keep, so that a
member uses only what the team's admins let jobs use; whether a claim or a Secret exists is the
cluster's to say, when the pods start. gpuqueue never reads a Secret: it passes names on.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings

from gpuqueue.core import fabric
from gpuqueue.core.fabric import RESERVED_MOUNTS
from gpuqueue.models import Flavor
from gpuqueue.services.jobs.validation import DNS1123_SUBDOMAIN, FieldErrors
from teams.models import Team

# A worker larger than any machine is a typo, not a request: 1,024 CPUs, 16 TiB.
MAX_CPU_MILLICORES = 1024 * 1000
MAX_MEMORY_MIB = 16 * 1024 * 1024
RESOURCE_BOUNDS: dict[str, tuple[int, int]] = {
    "cpu_millicores": (0, MAX_CPU_MILLICORES),
    "cpu_limit_millicores": (1, MAX_CPU_MILLICORES),
    "memory_mib": (0, MAX_MEMORY_MIB),
    "memory_limit_mib": (1, MAX_MEMORY_MIB),
    "shm_mib": (1, MAX_MEMORY_MIB),
}
MAX_VOLUMES = 16
MAX_SECRETS = 16
MAX_MOUNT_PATH_CHARS = 1024
VOLUME_KEYS = frozenset({"claim", "mount_path", "read_only"})

BAD_NAME = (
    "{name!r} is not a valid Kubernetes name: lowercase letters, digits, '-' and '.', starting "
    "and ending with a letter or digit, at most 253 characters."
)


def name_errors(name: str) -> list[str]:
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        return [BAD_NAME.format(name=name[:80])]
    return []


def secret_names_errors(names: Sequence[str]) -> list[str]:
    errors: list[str] = []
    if len(names) > MAX_SECRETS:
        errors.append(f"At most {MAX_SECRETS} Secrets; got {len(names)}.")
    for name in names:
        errors += name_errors(name)
    if len(set(names)) != len(names):
        errors.append("Each Secret at most once.")
    return errors


def mount_path_errors(path: str) -> list[str]:
    if len(path) > MAX_MOUNT_PATH_CHARS:
        return [f"Mount path longer than {MAX_MOUNT_PATH_CHARS} characters."]
    if not path.startswith("/") or posixpath.normpath(path) != path or path == "/":
        return [
            f"Mount path {path[:80]!r} must be an absolute, normalized path other than / "
            "(no '..', '.', '//' or trailing '/')."
        ]
    for reserved in RESERVED_MOUNTS:
        if path == reserved or path.startswith(reserved + "/"):
            return [f"Mount path {path} is under {reserved}, which gpuqueue mounts itself."]
    if ":" in path:
        return [f"Mount path {path[:80]!r} contains ':'."]
    return []


def volume_errors(volumes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Existing claims of the team's namespace, each at its own absolute path."""
    errors: list[str] = []
    if len(volumes) > MAX_VOLUMES:
        errors.append(f"At most {MAX_VOLUMES} volumes; got {len(volumes)}.")
    paths: list[str] = []
    for number, volume in enumerate(volumes, 1):
        unknown = sorted(set(volume) - VOLUME_KEYS)
        if unknown:
            errors.append(f"Volume {number}: unknown keys {', '.join(unknown)}.")
        missing = [key for key in ("claim", "mount_path") if not volume.get(key)]
        if missing:
            errors.append(f"Volume {number}: {' and '.join(missing)} required.")
            continue
        errors += [f"Volume {number}: {e}" for e in name_errors(volume["claim"])]
        errors += [f"Volume {number}: {e}" for e in mount_path_errors(volume["mount_path"])]
        paths.append(volume["mount_path"])
    if len(set(paths)) != len(paths):
        errors.append("Each mount path at most once.")
    return errors


def priority_class_errors(name: str) -> list[str]:
    allowed = settings.GPUQUEUE_PRIORITY_CLASSES
    if name in allowed:
        return []
    if not allowed:
        return [f"Unknown priority class {name[:80]!r}: this gpuqueue allows none."]
    return [f"Unknown priority class {name[:80]!r}; allowed: {', '.join(allowed)}."]


def service_account_errors(name: str) -> list[str]:
    return name_errors(name) if name else []


NOT_ALLOWED = (
    "{kind} {names} of namespace {namespace}: not on team {team}'s list of what its jobs may "
    "use ({allowed}); a team admin adds {them} under the team's allowed {what}."
)


# Each field that names objects of the team's namespace: the team's allow-list for it, what
# it names, and the list's name in messages.
ALLOW_LISTS = (
    ("service_account", "allowed_service_accounts", "ServiceAccount", "service accounts"),
    ("env_from_secrets", "allowed_secrets", "Secret", "secrets"),
    ("image_pull_secrets", "allowed_secrets", "Secret", "secrets"),
    ("volumes", "allowed_claims", "PersistentVolumeClaim", "claims"),
)
NAMESPACE_FIELDS = tuple(field for field, *_ in ALLOW_LISTS)


def _allowed_text(patterns: Sequence[str]) -> str:
    return "it lists none" if not patterns else "it lists " + ", ".join(patterns)


def namespace_errors(team: Team, job: Mapping[str, Any]) -> FieldErrors:
    """The ServiceAccount, Secrets and claims a job names that its team's admins have not
    allowed (teams.models.Team.unlisted). gpuqueue's ServiceAccount makes the pods, so this is
    where a member is kept from using what the namespace holds for others: whether the objects
    exist is the cluster's to say when the pods start."""
    errors: FieldErrors = {}
    for field, column, kind, what in ALLOW_LISTS:
        value = job.get(field)
        if field == "service_account":
            names = [value] if value else []
        elif field == "volumes":
            names = [str(volume["claim"]) for volume in value or ()]
        else:
            names = [str(name) for name in value or ()]
        unlisted = team.unlisted(column, names)
        if unlisted:
            errors[field] = [
                NOT_ALLOWED.format(
                    kind=kind + ("s" if len(unlisted) > 1 else ""),
                    names=", ".join(unlisted),
                    namespace=team.namespace,
                    team=team.slug,
                    allowed=_allowed_text(getattr(team, column)),
                    them="them" if len(unlisted) > 1 else "it",
                    what=what,
                )
            ]
    return errors


def worker_requests(
    cpu_millicores: int | None,
    memory_mib: int | None,
    gpus_per_worker: int,
    per_gpu: tuple[int, int],
) -> tuple[int, int]:
    """What a worker's pod requests, CPU in millicores and memory in MiB: the job's, or where it
    set none, its flavor's per GPU (`per_gpu`: Flavor.cpu_millicores_per_gpu and
    memory_mib_per_gpu) times the worker's GPUs (as its pods ask, cluster/manifests.py)."""
    return (
        per_gpu[0] * gpus_per_worker if cpu_millicores is None else cpu_millicores,
        per_gpu[1] * gpus_per_worker if memory_mib is None else memory_mib,
    )


def resource_per_worker(job: Any, flavor: Flavor) -> int:
    """How much of the flavor's resource a worker's pod asks: its GPUs, or on a shared flavor
    (whose resource counts slices) its slices: those of its fraction, or every slice of each
    whole GPU, so that the kube-scheduler counts what gpuqueue counts. A DRA flavor's count
    devices, shared or not: a fraction's worker gets its one device from a shared claim."""
    if not flavor.counts_slices:
        return int(job.gpus_per_worker)
    if job.gpu_milli:
        return flavor.slices_for(job.gpu_milli)
    return int(job.gpus_per_worker) * flavor.slices_per_gpu


def uses_namespace_objects(job: Mapping[str, Any]) -> bool:
    return any(job.get(field) for field in NAMESPACE_FIELDS)


def fabric_mount_errors(job: Mapping[str, Any], flavor: Flavor) -> FieldErrors:
    """A claim of the job may not sit on or under a path its flavor's fabric mounts."""
    taken = fabric.parse(flavor.fabric).mount_paths
    clashes = [
        f"Mount path {volume['mount_path']} is under {path}, which the flavor {flavor.name} "
        "mounts for its network."
        for volume in job.get("volumes") or ()
        for path in taken
        if volume["mount_path"] == path or volume["mount_path"].startswith(path + "/")
    ]
    return {"volumes": clashes} if clashes else {}


def resources(job: Mapping[str, Any], flavor: Flavor) -> tuple[dict[str, Any], FieldErrors]:
    """The worker's CPU, memory and /dev/shm with the flavor's defaults filled in, and what is
    wrong with them as a whole.

    1. A request left out is the flavor's per-GPU value times the worker's GPUs (or its
       fraction of one, rounded up), capped by the flavor's maximum per worker (an admin's
       defaults never refuse a job by themselves).
    2. Requests and limits asked for are within the flavor's maximum.
    3. A limit is at least its request; /dev/shm, which lives in the worker's memory, fits the
       memory limit.
    """
    # A worker's GPUs in thousandths: a fraction of one takes that part of the per-GPU values.
    milli = job.get("gpu_milli") or job["gpus_per_worker"] * 1000
    max_cpu, max_memory = flavor.max_cpu_millicores_per_worker, flavor.max_memory_mib_per_worker
    values: dict[str, Any] = {}
    errors: FieldErrors = {}

    def default(per_gpu: int, most: int | None) -> int:
        asked = -(-per_gpu * milli // 1000)
        return asked if most is None else min(asked, most)

    # 1.
    values["cpu_millicores"] = job.get("cpu_millicores")
    if values["cpu_millicores"] is None:
        values["cpu_millicores"] = default(flavor.cpu_millicores_per_gpu, max_cpu)
    values["memory_mib"] = job.get("memory_mib")
    if values["memory_mib"] is None:
        values["memory_mib"] = default(flavor.memory_mib_per_gpu, max_memory)
    for field in ("cpu_limit_millicores", "memory_limit_mib", "shm_mib"):
        values[field] = job.get(field)
    # 2.
    for field, most, unit in (
        ("cpu_millicores", max_cpu, "millicores"),
        ("cpu_limit_millicores", max_cpu, "millicores"),
        ("memory_mib", max_memory, "MiB"),
        ("memory_limit_mib", max_memory, "MiB"),
    ):
        asked = job.get(field)
        if most is not None and asked is not None and asked > most:
            errors[field] = [
                f"{asked} {unit} per worker is more than flavor {flavor.name} allows: at most "
                f"{most}."
            ]
    # 3.
    cpu_limit = values["cpu_limit_millicores"]
    if cpu_limit is not None and cpu_limit < values["cpu_millicores"]:
        errors.setdefault("cpu_limit_millicores", []).append(
            f"The CPU limit ({cpu_limit} millicores) is below the request "
            f"({values['cpu_millicores']})."
        )
    memory_limit = values["memory_limit_mib"]
    if memory_limit is not None and memory_limit < values["memory_mib"]:
        errors.setdefault("memory_limit_mib", []).append(
            f"The memory limit ({memory_limit} MiB) is below the request ({values['memory_mib']})."
        )
    memory = values["memory_mib"] if memory_limit is None else memory_limit
    shm = values["shm_mib"]
    if shm is not None and memory and shm > memory:
        errors["shm_mib"] = [
            f"/dev/shm of {shm} MiB does not fit the worker's memory of {memory} MiB."
        ]
    return values, errors
