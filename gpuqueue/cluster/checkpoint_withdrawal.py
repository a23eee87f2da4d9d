"""Withdrawing a checkpoint request on Kubernetes (`ClusterBackend.withdraw_checkpoint`).

`request_checkpoint` annotates every pod of the attempt with its deadline, which the workload
reads from its downward-API file. Withdrawing removes that annotation (a JSON merge patch with
null deletes the key): the file no longer names a deadline and the workload goes on running.
A pod that carries no request is left alone, and a pod gone meanwhile has nothing to withdraw.

KubernetesBackend wires it as its method (and says so, `withdraws_checkpoints = True`):

    def withdraw_checkpoint(self, job_id: int, attempt: int) -> None:
        withdraw_checkpoint(self, job_id, attempt)
"""

from __future__ import annotations

from typing import Any

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.k8s_calls import NotFound

# The merge patch that takes the request off a pod.
WITHDRAW_PATCH: dict[str, Any] = {"metadata": {"annotations": {mf.CHECKPOINT_ANNOTATION: None}}}


def withdraw_checkpoint(backend: Any, job_id: int, attempt: int) -> None:
    """Take the checkpoint request off every pod of the attempt that gpuqueue proves it made
    (`KubernetesBackend._pods_of`), through the backend's API calls (retries, errors)."""
    for pod in backend._pods_of(job_id, attempt):
        meta = pod["metadata"]
        if mf.CHECKPOINT_ANNOTATION not in (meta.get("annotations") or {}):
            continue
        try:
            backend.call(
                f"withdraw the checkpoint request of pod {meta.get('namespace')}/{meta['name']}",
                backend.core.patch_namespaced_pod,
                meta["name"],
                meta["namespace"],
                WITHDRAW_PATCH,
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=backend.timeout,
            )
        except NotFound:
            continue
