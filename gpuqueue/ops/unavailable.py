"""503 instead of 500 while PostgreSQL or Redis is away.

The launcher (or Kubernetes) brings a dead server back within seconds; until then a request
that needed it is answered "try again shortly" (JSON for the API, with Retry-After), and the
next request after the server returns works again: Django checks a kept database connection
before reusing it (CONN_HEALTH_CHECKS) and the Redis client reconnects by itself.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

from gpuqueue.ops.request_guard import refusal

log = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = 5
UNAVAILABLE = (OperationalError, InterfaceError, redis.ConnectionError, redis.TimeoutError)


class ServiceUnavailableMiddleware:
    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not isinstance(exc, UNAVAILABLE):
            return None
        log.warning("answering 503: %s: %s", type(exc).__name__, exc)
        message = "gpuqueue's database or Redis is briefly unavailable; retry shortly."
        response = refusal(request, 503, "unavailable", message)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
