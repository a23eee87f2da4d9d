"""Pure: the ResourceClaim that fractions of one GPU of a shared DRA flavor share.

gpuqueue packs fractional jobs on a GPU of a node (gpuqueue/scheduler/shared_gpus.py: a node
and a GPU index). On a DRA flavor those jobs' pods must get the same device, and DRA gives one
device to one claim: so each GPU gpuqueue opens gets one ResourceClaim (not a template), named
after the flavor, the node and the GPU index, which every sharing pod names
(`resourceClaimName`). It asks one device of the flavor's class and selector with the NVIDIA
driver's sharing configuration (opaque `GpuConfig`, strategy TimeSlicing or MPS); kube-scheduler
allocates it when the first sharer binds, on the node the pod is pinned to, and the later
sharers, pinned to the same node, use that allocation.

A claim lives in one namespace, so a GPU serves one team (Snapshot.team_gpu_flavors); and every
pod of a Job names the same claims, so a fraction of a DRA GPU is one worker's.

Its lifetime is its sharers': each sharing attempt's Secret is one of its ownerReferences (the
garbage collector deletes it once none is left, whatever became of gpuqueue), and a stop takes
its own reference off, deleting the claim when it was the last. It is proven gpuqueue's by its
name and an HMAC over the namespace, the name and the install (gpuqueue.cluster.proof).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from gpuqueue.cluster.manifests import (
    DEVICE_CLAIM,
    LABEL_INSTANCE,
    MANAGED_BY,
    MANAGED_BY_VALUE,
    PROOF_ANNOTATION,
    owner_reference,
)

DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver, whose GpuConfig the claim carries
CONFIG_API = "resource.nvidia.com/v1beta1"
LABEL_SHARED = "gpuqueue.dev/shared-gpu"  # the GPU index on its node
NODE_ANNOTATION = "gpuqueue.dev/node"
STRATEGIES = ("TimeSlicing", "MPS")
_NAME_MAX = 253
_UNSAFE = re.compile(r"[^a-z0-9.-]")


def claim_name(flavor: str, node: str, index: int) -> str:
    """`gq-gpu-<flavor>-<node>-<index>`: one per GPU gpuqueue opened, in each namespace. A name
    too long for the API keeps its start and ends in a digest of the whole."""
    name = _UNSAFE.sub("-", f"gq-gpu-{flavor}-{node}-{index}".lower())
    if len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[: _NAME_MAX - 17].rstrip('.-')}-{digest}"


def sharing_config(strategy: str) -> dict[str, Any]:
    """The NVIDIA driver's opaque configuration for sharing one GPU among a claim's pods."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown GPU sharing strategy {strategy!r}")
    return {
        "requests": [DEVICE_CLAIM],
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": CONFIG_API,
                "kind": "GpuConfig",
                "sharing": {"strategy": strategy},
            },
        },
    }


def claim_manifest(
    *,
    name: str,
    namespace: str,
    node: str,
    index: int,
    device_class: str,
    device_selector: str,
    strategy: str,
    instance: str,
    proof: str,
    owner: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The shared claim: one device of the class (and selector), shared by `strategy`, owned
    by the first sharer's Secret (the others add theirs: `with_owner`)."""
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": 1,
    }
    if device_selector.strip():
        exactly["selectors"] = [{"cel": {"expression": device_selector}}]
    labels = {MANAGED_BY: MANAGED_BY_VALUE, LABEL_SHARED: str(index)}
    if instance:
        labels[LABEL_INSTANCE] = instance
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels,
        "annotations": {PROOF_ANNOTATION: proof, NODE_ANNOTATION: node},
    }
    if owner is not None and (reference := owner_reference(owner)):
        metadata["ownerReferences"] = [reference]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {
            "devices": {
                "requests": [{"name": DEVICE_CLAIM, "exactly": exactly}],
                "config": [sharing_config(strategy)],
            }
        },
    }


def owners(claim: Mapping[str, Any]) -> list[str]:
    """The uids of the Secrets that own the claim: its sharers' attempts."""
    return [
        str(ref.get("uid") or "")
        for ref in (claim.get("metadata") or {}).get("ownerReferences") or []
        if ref.get("kind") == "Secret"
    ]


def terminating(claim: Mapping[str, Any]) -> bool:
    return bool((claim.get("metadata") or {}).get("deletionTimestamp"))


def with_owner(claim: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """The claim with `owner` (a sharer's Secret) among its ownerReferences; as it was when
    already there."""
    reference = owner_reference(owner)
    metadata = dict(claim.get("metadata") or {})
    refs = list(metadata.get("ownerReferences") or [])
    if reference is not None and reference["uid"] not in {r.get("uid") for r in refs}:
        refs.append(reference)
    metadata["ownerReferences"] = refs
    return {**claim, "metadata": metadata}


def without_owner(claim: Mapping[str, Any], uid: str) -> dict[str, Any]:
    metadata = dict(claim.get("metadata") or {})
    metadata["ownerReferences"] = [
        r for r in metadata.get("ownerReferences") or [] if r.get("uid") != uid
    ]
    return {**claim, "metadata": metadata}
