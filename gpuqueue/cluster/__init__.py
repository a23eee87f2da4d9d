"""Cluster backends behind one interface; `get_backend()` picks the configured one."""

from __future__ import annotations

from functools import cache

from gpuqueue.cluster.base import ClusterBackend


@cache
def get_backend() -> ClusterBackend:
    from django.conf import settings

    if settings.GPUQUEUE_CLUSTER_BACKEND == "kubernetes":
        from gpuqueue.cluster.kubernetes import KubernetesBackend

        return KubernetesBackend.from_settings()
    from gpuqueue.cluster.simulated import SimulatedBackend

    return SimulatedBackend.from_settings()
