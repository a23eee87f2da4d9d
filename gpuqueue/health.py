"""Health: can gpuqueue reach its database, Redis and the cluster API?

The cluster's answer comes from whichever process last talked to it (the watcher, a worker):
the Kubernetes backend records every call's outcome here, in the Redis cache, so that a web
request never waits on Kubernetes. `GET /healthz` reports all three; the dashboard shows it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

log = logging.getLogger(__name__)
CLUSTER_KEY = "health:cluster"
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
    }


def database_status() -> dict[str, Any]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return {"status": "ok"}
    except Exception as exc:
        return {"status": "unreachable", "detail": str(exc)}


def redis_status() -> dict[str, Any]:
    try:
        cache.set("health:ping", 1, timeout=10)
        return {"status": "ok"}
    except Exception as exc:
        return {"status": "unreachable", "detail": str(exc)}


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when the database and Redis answer (the web process can serve), else 503; the
    cluster's state is reported but does not fail the probe: an unreachable Kubernetes API must
    not get the web pods restarted, since they cannot fix it."""
    body: dict[str, Any] = {
        "database": database_status(),
        "redis": redis_status(),
        "cluster": cluster_status(),
    }
    ok = body["database"]["status"] == "ok" and body["redis"]["status"] == "ok"
    body["status"] = (
        "ok" if ok and body["cluster"]["status"] == "ok" else ("degraded" if ok else "unavailable")
    )
    return JsonResponse(body, status=200 if ok else 503)
