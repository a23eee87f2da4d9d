"""A flavor's fabric: what its workers need besides GPUs to reach the cluster's network
(standard library only).

A multi-node gang on an InfiniBand or RoCE cluster needs RDMA devices, the IPC_LOCK capability
to pin memory, Multus network attachments and often the NVIDIA runtime class; without them NCCL
falls back to TCP. An admin writes these on the flavor; every worker of the flavor's jobs gets
them. A fabric can add nothing that lifts the pod out of its sandbox beyond that: no privileged
mode, no capability outside `CAPABILITIES`, no host path outside the install's allow-list
(`GPUQUEUE_FABRIC_HOST_PATHS`), no GPU resource (GPUs go through the queue), no annotation in
gpuqueue's or CDI's namespace (device requests that would walk around the queue).

    {
      "resources": {"rdma/rdma_shared_device_a": 1},   # per worker, requests = limits
      "capabilities": ["IPC_LOCK"],
      "annotations": {"k8s.v1.cni.cncf.io/networks": "ib-a,ib-b"},
      "runtime_class": "nvidia",
      "volumes": [
        {"name": "infiniband", "host_path": "/dev/infiniband", "mount_path": "/dev/infiniband"}
      ]
    }
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Capabilities RDMA and NCCL need, and nothing that would let a container leave its sandbox
# (SYS_ADMIN, NET_ADMIN, SYS_PTRACE …). IPC_LOCK pins memory for RDMA; SYS_RESOURCE raises the
# locked-memory limit where the runtime sets a low one.
CAPABILITIES = frozenset({"IPC_LOCK", "SYS_RESOURCE"})
KEYS = ("resources", "capabilities", "annotations", "runtime_class", "volumes")
VOLUME_KEYS = frozenset({"name", "host_path", "mount_path", "read_only"})
# Resource names gpuqueue itself sets or that are GPUs: a fabric adds devices beside them.
RESERVED_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods", "hugepages-")
# Annotation domains a fabric may not write: gpuqueue's own (proof, ids) and CDI device
# requests (which the admission policy refuses from anyone but gpuqueue).
RESERVED_ANNOTATION_DOMAINS = ("gpuqueue.dev", "cdi.k8s.io", "kubernetes.io", "k8s.io")
# Paths gpuqueue mounts itself in every worker.
RESERVED_MOUNTS = ("/dev/shm", "/etc/gpuqueue")
MAX_RESOURCE_COUNT = 1024
MAX_ANNOTATION_CHARS = 4096
MAX_VOLUMES = 8

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class FabricVolume:
    name: str
    host_path: str
    mount_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class Fabric:
    resources: Mapping[str, int]
    capabilities: tuple[str, ...] = ()
    annotations: Mapping[str, str] | None = None
    runtime_class: str = ""
    volumes: tuple[FabricVolume, ...] = ()

    @property
    def mount_paths(self) -> tuple[str, ...]:
        return tuple(v.mount_path for v in self.volumes)


NO_FABRIC = Fabric(resources={})


def _qualified(name: str) -> tuple[str, str] | None:
    """(prefix, name) of a Kubernetes qualified name (`prefix/name` or `name`), or None."""
    prefix, _, base = name.rpartition("/")
    if not _NAME.match(base) or (prefix and not _DNS_SUBDOMAIN.match(prefix)):
        return None
    return prefix, base


def _reserved_domain(prefix: str) -> bool:
    return any(prefix == d or prefix.endswith("." + d) for d in RESERVED_ANNOTATION_DOMAINS)


def _resource_errors(resources: Any, is_gpu: Any) -> list[str]:
    if not isinstance(resources, Mapping):
        return ["resources: a mapping of resource name to a count per worker."]
    errors = []
    for name, count in resources.items():
        parsed = _qualified(name) if isinstance(name, str) else None
        if parsed is None or not parsed[0]:
            errors.append(
                f"resources: {str(name)[:80]!r} is not a device resource name (domain/name)."
            )
        elif name.startswith(RESERVED_RESOURCES) or is_gpu(name):
            errors.append(f"resources: {name} is set by gpuqueue itself, not by a fabric.")
        if isinstance(count, bool) or not isinstance(count, int):
            errors.append(f"resources: {str(name)[:80]} needs a whole count; got {count!r}.")
        elif not 1 <= count <= MAX_RESOURCE_COUNT:
            errors.append(f"resources: {name} from 1 to {MAX_RESOURCE_COUNT}; got {count}.")
    return errors


def _capability_errors(capabilities: Any) -> list[str]:
    if not isinstance(capabilities, list) or not all(isinstance(c, str) for c in capabilities):
        return ["capabilities: a list of capability names."]
    allowed = ", ".join(sorted(CAPABILITIES))
    return [
        f"capabilities: {c[:40]} is not one a fabric may add ({allowed})."
        for c in capabilities
        if c not in CAPABILITIES
    ]


def _annotation_errors(annotations: Any) -> list[str]:
    if not isinstance(annotations, Mapping):
        return ["annotations: a mapping of annotation key to text."]
    errors = []
    for key, value in annotations.items():
        parsed = _qualified(key) if isinstance(key, str) else None
        if parsed is None:
            errors.append(f"annotations: {str(key)[:80]!r} is not a valid annotation key.")
        elif parsed[0] and _reserved_domain(parsed[0]):
            errors.append(f"annotations: {key} is in a domain a fabric may not write.")
        if not isinstance(value, str) or len(value) > MAX_ANNOTATION_CHARS:
            errors.append(
                f"annotations: {str(key)[:80]} needs text of at most {MAX_ANNOTATION_CHARS} "
                "characters."
            )
    return errors


def _under(path: str, roots: Collection[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _path_ok(path: Any) -> bool:
    return (
        isinstance(path, str)
        and path.startswith("/")
        and path != "/"
        and posixpath.normpath(path) == path
        and ":" not in path
    )


def _volume_errors(
    volumes: Any, host_paths: Collection[str], reserved_mounts: Sequence[str]
) -> list[str]:
    if not isinstance(volumes, list):
        return ["volumes: a list of host paths to mount."]
    if len(volumes) > MAX_VOLUMES:
        return [f"volumes: at most {MAX_VOLUMES}; got {len(volumes)}."]
    errors: list[str] = []
    names: list[str] = []
    mounts: list[str] = []
    allowed = ", ".join(sorted(host_paths)) or "none (GPUQUEUE_FABRIC_HOST_PATHS is empty)"
    for number, volume in enumerate(volumes, 1):
        if not isinstance(volume, Mapping):
            errors.append(f"volumes: volume {number} must be a mapping.")
            continue
        unknown = sorted(set(volume) - VOLUME_KEYS)
        if unknown:
            errors.append(f"volumes: volume {number} has unknown keys {', '.join(unknown)}.")
        name, host, mount = volume.get("name"), volume.get("host_path"), volume.get("mount_path")
        if not isinstance(name, str) or not _DNS_LABEL.match(name):
            errors.append(f"volumes: volume {number} needs a name (a DNS label).")
        else:
            names.append(name)
        if not _path_ok(host):
            errors.append(f"volumes: volume {number} needs an absolute, normalized host_path.")
        elif not _under(host, host_paths):
            errors.append(f"volumes: host path {host} is not under an allowed one ({allowed}).")
        if not _path_ok(mount):
            errors.append(f"volumes: volume {number} needs an absolute, normalized mount_path.")
        elif _under(mount, reserved_mounts):
            errors.append(f"volumes: mount path {mount} is one gpuqueue mounts itself.")
        else:
            mounts.append(mount)
        if not isinstance(volume.get("read_only", False), bool):
            errors.append(f"volumes: volume {number}'s read_only is true or false.")
    if len(set(names)) != len(names):
        errors.append("volumes: each name at most once.")
    if len(set(mounts)) != len(mounts):
        errors.append("volumes: each mount path at most once.")
    return errors


def fabric_errors(fabric: Any, *, host_paths: Collection[str], is_gpu: Any) -> list[str]:
    """What is wrong with a flavor's fabric, as sentences; [] when it may be used.
    `host_paths`: the host paths the install allows; `is_gpu(resource name)`: whether a
    resource is a GPU."""
    if fabric is None or fabric == {}:
        return []
    if not isinstance(fabric, Mapping):
        return ["A fabric is a mapping with the keys " + ", ".join(KEYS) + "."]
    unknown = sorted(set(fabric) - set(KEYS))
    errors = [
        f"Unknown key {key[:40]!r}; a fabric may set {', '.join(KEYS)}."
        for key in map(str, unknown)
    ]
    if "resources" in fabric:
        errors += _resource_errors(fabric["resources"], is_gpu)
    if "capabilities" in fabric:
        errors += _capability_errors(fabric["capabilities"])
    if "annotations" in fabric:
        errors += _annotation_errors(fabric["annotations"])
    if "runtime_class" in fabric:
        runtime_class = fabric["runtime_class"]
        if not isinstance(runtime_class, str) or not _DNS_SUBDOMAIN.match(runtime_class):
            errors.append("runtime_class: the name of a RuntimeClass (a DNS subdomain).")
    if "volumes" in fabric:
        errors += _volume_errors(fabric["volumes"], host_paths, RESERVED_MOUNTS)
    return errors


def parse(fabric: Mapping[str, Any] | None) -> Fabric:
    """A fabric that `fabric_errors` passed, as data."""
    if not fabric:
        return NO_FABRIC
    return Fabric(
        resources={str(k): int(v) for k, v in sorted((fabric.get("resources") or {}).items())},
        capabilities=tuple(sorted(set(fabric.get("capabilities") or ()))),
        annotations=dict(sorted((fabric.get("annotations") or {}).items())) or None,
        runtime_class=str(fabric.get("runtime_class") or ""),
        volumes=tuple(
            FabricVolume(
                name=str(v["name"]),
                host_path=str(v["host_path"]),
                mount_path=str(v["mount_path"]),
                read_only=bool(v.get("read_only", False)),
            )
            for v in fabric.get("volumes") or ()
        ),
    )
