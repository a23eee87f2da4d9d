"""Health: can gpuqueue reach its database, Redis and the cluster API?

The cluster's answer comes from whichever process last talked to it (the watcher, a worker):
the Kubernetes backend records every call's outcome (gpuqueue/core/cluster_health.py) in the
Redis cache, so that a web
request never waits on Kubernetes. `GET /healthz` reports all three; the dashboard shows it.
"""

from __future__ import annotations

from typing import Any

from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from gpuqueue.core.cluster_health import cluster_status


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
    not get the web pods restarted, since they cannot fix it. Anonymous callers (probes) learn
    only the status; a signed-in user also sees each part and its error."""
    body: dict[str, Any] = {
        "database": database_status(),
        "redis": redis_status(),
        "cluster": cluster_status(),
    }
    ok = body["database"]["status"] == "ok" and body["redis"]["status"] == "ok"
    body["status"] = (
        "ok" if ok and body["cluster"]["status"] == "ok" else ("degraded" if ok else "unavailable")
    )
    if not signed_in(request):
        body = {"status": body["status"]}
    return JsonResponse(body, status=200 if ok else 503)


def signed_in(request: HttpRequest) -> bool:
    """A session user; read only when the database answers (the session lives there)."""
    try:
        return bool(request.user.is_authenticated)
    except Exception:  # noqa: BLE001 - the database is what this endpoint reports on
        return False
