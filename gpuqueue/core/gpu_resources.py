"""Which Kubernetes resource names are GPUs (standard library only)."""

from __future__ import annotations

# Whole GPUs, MIG slices (`nvidia.com/mig-1g.10gb`) and time-sliced shares (the GPU Operator's
# `nvidia.com/gpu.shared` when it renames replicas).
GPU_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


def is_gpu_resource(name: str) -> bool:
    return name.startswith(GPU_PREFIXES)
