"""The cluster API's health as its callers saw it, kept in the Redis cache.

Whichever process talks to the cluster (the watcher, a worker) records each call's outcome,
so that `/healthz` and the dashboard read it without a web request ever waiting on Kubernetes.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)
CLUSTER_KEY = "health:cluster"
# What the cluster serves that changes how gangs are launched ({"pod_groups": bool}), as the
# backend found it when it started.
FEATURES_KEY = "health:cluster-features"
# A healthy API is re-recorded at most this often (every call reports; Redis need not hear it).
_REFRESH_SECONDS = 10.0
_last_written: dict[str, Any] = {"ok": None, "at": 0.0}


def record_cluster(ok: bool, detail: str = "", *, backend: str = "kubernetes") -> None:
    """Note the outcome of a cluster API call; failures always, successes when they change the
    state or the record is getting old. Never raises: health must not break the caller."""
    now = time.time()
    if ok and _last_written["ok"] is True and now - _last_written["at"] < _REFRESH_SECONDS:
        return
    value = {"ok": ok, "detail": detail, "backend": backend, "at": now}
    try:
        cache.set(CLUSTER_KEY, value, timeout=settings.GPUQUEUE_CLUSTER_HEALTH_TTL_SECONDS)
    except Exception as exc:  # Redis down: /healthz reports that separately
        log.warning("cannot record cluster health: %s", exc)
        return
    _last_written.update(ok=ok, at=now)


def record_features(features: dict[str, Any]) -> None:
    """Note what the backend found the cluster serves; never raises."""
    try:
        cache.set(FEATURES_KEY, features, timeout=None)
    except Exception as exc:
        log.warning("cannot record the cluster's features: %s", exc)


def cluster_features() -> dict[str, Any]:
    try:
        return dict(cache.get(FEATURES_KEY) or {})
    except Exception:
        return {}


def cluster_status() -> dict[str, Any]:
    """{"status": "ok" | "unreachable" | "unknown", ...}; unknown when nothing recent was
    recorded (the simulated cluster records nothing: it cannot be unreachable)."""
    if settings.GPUQUEUE_CLUSTER_BACKEND == "simulated":
        return {"status": "ok", "backend": "simulated"}
    try:
        value = cache.get(CLUSTER_KEY)
    except Exception:
        value = None
    if not value:
        return {"status": "unknown", "backend": settings.GPUQUEUE_CLUSTER_BACKEND}
    return {
        "status": "ok" if value["ok"] else "unreachable",
        "backend": value.get("backend", ""),
        "detail": value.get("detail", ""),
        "checked_at": value.get("at"),
        # pod_groups: each gang carries a PodGroup (Kubernetes 1.37's Workload API)
        **({"features": features} if (features := cluster_features()) else {}),
    }
