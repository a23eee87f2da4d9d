"""Which Kubernetes resource names are GPUs (standard library only)."""

from __future__ import annotations

# Whole GPUs, MIG slices (`nvidia.com/mig-1g.10gb`) and time-sliced shares (the GPU Operator's
# `nvidia.com/gpu.shared` when it renames replicas).
GPU_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_PREFIXES)


# The resource name under which a DRA flavor's devices are counted in the snapshot
# (gpuqueue.cluster.dra). Never a resource of the cluster: a pod asks for its devices through a
# ResourceClaim, not in its limits.
DRA_RESOURCE_PREFIX = "dra.gpuqueue.dev/"


def dra_resource_name(flavor_name: str) -> str:
    return f"{DRA_RESOURCE_PREFIX}{flavor_name}"


def is_dra_resource(name: str) -> bool:
    return name.startswith(DRA_RESOURCE_PREFIX)
