"""Calling the Kubernetes API: which errors are worth retrying, with backoff, and health.

1. 409 Conflict is not an error here: the caller adopts what exists (`Conflict`).
2. 404 Not Found is raised as `NotFound` for the caller to decide (deleting: already gone).
3. 403 Forbidden, 422 Invalid, 400 and other 4xx: the API refused for good; a permanent
   ClusterError carrying the API's own message (a job launched this way FAILS with it).
4. 429, 5xx, 401 (credentials being rotated), timeouts and connection errors: retried with
   exponential backoff; once the attempts are spent, a transient ClusterError (the job stays
   where it is and the next pass retries).
Every outcome is reported to `on_health` so that /healthz shows an unreachable API. Before any
call, no credentials to make it with (`load_configuration`) is `NoCredentials`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gpuqueue.cluster.base import ClusterError, NoCredentials

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRIED_STATUSES = frozenset({401, 429, 500, 502, 503, 504})


class Conflict(Exception):
    """409: the object already exists."""


class NotFound(Exception):
    """404: the object (or its namespace) does not exist."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def load_configuration(
    configuration: client.Configuration, kubeconfig: str | None, context: str | None = None
) -> None:
    """Fill `configuration` from `kubeconfig`, else from the pod's ServiceAccount; raises
    NoCredentials when there is neither, with the client's sentence saying what is missing."""
    try:
        if kubeconfig:
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        raise NoCredentials(str(exc)) from exc


def api_message(exc: ApiException) -> str:
    """The API's own sentence (from its Status body), else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or f"HTTP {exc.status}")


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return (
            exc.status is None
            or exc.status == 0
            or exc.status in RETRIED_STATUSES
            or exc.status >= 500
        )
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError | TimeoutError)


class Caller:
    """Runs one API call with the retry policy above."""

    def __init__(
        self,
        *,
        attempts: int = 3,
        backoff_seconds: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        on_health: Callable[[bool, str], None] | None = None,
    ) -> None:
        self.attempts = max(1, attempts)
        self.backoff = backoff_seconds
        self.sleep = sleep
        self.on_health = on_health or (lambda ok, detail: None)

    def __call__(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                result = fn(*args, **kwargs)
            except ApiException as exc:
                if exc.status == 409:
                    self.on_health(True, "")
                    raise Conflict(api_message(exc)) from exc
                if exc.status == 404:
                    self.on_health(True, "")
                    raise NotFound(api_message(exc)) from exc
                if not is_transient(exc):
                    self.on_health(True, "")  # the API answered: it is up, it just said no
                    raise ClusterError(f"{what}: {api_message(exc)}", transient=False) from exc
                error: BaseException = exc
                detail = f"{what}: HTTP {exc.status}: {api_message(exc)}"
            except (urllib3.exceptions.HTTPError, OSError, TimeoutError) as exc:
                error, detail = exc, f"{what}: {type(exc).__name__}: {exc}"
            else:
                self.on_health(True, "")
                return result
            log.warning("%s (attempt %d of %d)", detail, attempt, self.attempts)
            if attempt == self.attempts:
                self.on_health(False, detail)
                raise ClusterError(detail, transient=True) from error
            self.sleep(self.backoff * 2 ** (attempt - 1))
        raise AssertionError("unreachable")
