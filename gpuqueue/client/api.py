"""The public API over urllib: submit (idempotent, retried), list, get, wait, cancel, events,
logs.

It imports nothing from the server side, so that `pip install gpuqueue` on a laptop or in a CI
image is enough to drive a remote gpuqueue.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
RETRY_STATUSES = frozenset({429, 502, 503, 504})
DEFAULT_URL = "http://127.0.0.1:8000"  # `make run`'s address
MAX_TAIL = 10_000  # the most lines one read of a log returns


class ApiError(Exception):
    """An error answer: status, and the server's {"code", "message", "fields"}."""

    def __init__(self, status: int, code: str, message: str, fields: dict[str, Any] | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.fields = status, code, message, fields or {}

    def __str__(self) -> str:
        lines = [f"{self.message} ({self.status} {self.code})"]
        for name, messages in self.fields.items():
            for message in messages if isinstance(messages, list) else [messages]:
                lines.append(f"  {name}: {message}")
        return "\n".join(lines)


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(os.environ.get("GPUQUEUE_CONFIG", str(Path(base) / "gpuqueue" / "config.json")))


def load_config() -> dict[str, str]:
    """URL and token: the environment (GPUQUEUE_URL, GPUQUEUE_TOKEN) wins over the file."""
    config: dict[str, str] = {}
    path = config_path()
    if path.exists():
        config.update(json.loads(path.read_text()))
    for key, env in (("url", "GPUQUEUE_URL"), ("token", "GPUQUEUE_TOKEN")):
        if os.environ.get(env):
            config[key] = os.environ[env]
    return config


def save_config(url: str, token: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # The token is a secret: the file is readable by its owner only, from its first byte.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "token": token}, f)
    return path


class Client:
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 4,
    ) -> None:
        config = load_config()
        self.url_configured = bool(url or config.get("url"))
        self.url = (url or config.get("url") or DEFAULT_URL).rstrip("/")
        self.token = token or config.get("token")
        self.timeout = timeout
        self.retries = retries

    # --- transport ----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        query: dict[str, Any] | None = None,
        retry: bool = False,
    ) -> tuple[int, Any]:
        """One call; with `retry`, network errors and 429/5xx are retried with backoff (only
        for requests safe to repeat: reads, and submissions that carry an idempotency key)."""
        url = path if path.startswith("http") else f"{self.url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(
                [
                    (k, v)
                    for k, vs in query.items()
                    if vs is not None
                    for v in (vs if isinstance(vs, list) else [vs])
                ]
            )
        data = json.dumps(body).encode() if body is not None else None
        all_headers = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        attempts = self.retries + 1 if retry else 1
        for attempt in range(attempts):
            req = urllib.request.Request(url, data=data, method=method, headers=all_headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as response:
                    raw = response.read()
                    return response.status, json.loads(raw) if raw else None
            except urllib.error.HTTPError as exc:
                raw = exc.read()
                if exc.code in RETRY_STATUSES and attempt + 1 < attempts:
                    time.sleep(_backoff(attempt, exc.headers.get("Retry-After")))
                    continue
                error = _error(exc.code, raw)
                if exc.code == 401:
                    error.message = f"{error.message} {self._token_advice()}"
                raise error from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt + 1 < attempts:
                    time.sleep(_backoff(attempt, None))
                    continue
                message = f"cannot reach {self.url}: {exc}."
                if not self.url_configured:
                    message += f" No server is configured: {self._where_to_configure()}"
                raise ApiError(0, "unreachable", message) from None
        raise AssertionError("unreachable")

    def _where_to_configure(self) -> str:
        return (
            "set GPUQUEUE_URL and GPUQUEUE_TOKEN, or run `gpuqueue configure --url URL --token "
            f"TOKEN` (which writes {config_path()})."
        )

    def _token_advice(self) -> str:
        """What to do about a 401: the command never says only "not authenticated"."""
        make = (
            f"Make a token on the dashboard's Tokens page ({self.url}/tokens/) or with "
            "`manage.py create_api_token USERNAME` on the server, then "
        )
        if not self.token:
            return f"No API token is configured. {make}{self._where_to_configure()}"
        return (
            "The API token was refused: it may be mistyped, expired or revoked. "
            f"{make}{self._where_to_configure()}"
        )

    # --- jobs ---------------------------------------------------------------------------------

    def submit(self, job: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        """Submit once: a retry after a timeout carries the same key, so at most one job exists
        (docs/architecture.md, scenario 7). Returns the job (the first, if the key was used)."""
        key = idempotency_key or str(uuid.uuid4())
        _, body = self.request(
            "POST", "/api/v1/jobs/", job, headers={"Idempotency-Key": key}, retry=True
        )
        return dict(body)

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("GET", f"/api/v1/jobs/{job_id}/", retry=True)[1])

    def submit_array(
        self, job: dict[str, Any], idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """A job array (`job["array"]`: "0-999%50" or its fields), as safely as `submit`."""
        key = idempotency_key or str(uuid.uuid4())
        _, body = self.request(
            "POST", "/api/v1/arrays/", job, headers={"Idempotency-Key": key}, retry=True
        )
        return dict(body)

    def array(self, array_id: int) -> dict[str, Any]:
        return dict(self.request("GET", f"/api/v1/arrays/{array_id}/", retry=True)[1])

    def jobs(self, limit: int | None = None, **filters: Any) -> Iterator[dict[str, Any]]:
        """Jobs newest first, following the cursor pages."""
        url: str | None = "/api/v1/jobs/"
        query: dict[str, Any] | None = {k: v for k, v in filters.items() if v is not None}
        seen = 0
        while url:
            _, page = self.request("GET", url, query=query, retry=True)
            for job in page["results"]:
                yield job
                seen += 1
                if limit is not None and seen >= limit:
                    return
            url, query = page.get("next"), None

    def cancel(self, job_id: int) -> dict[str, Any]:
        return dict(self.request("POST", f"/api/v1/jobs/{job_id}/cancel/")[1])

    def cancel_array(self, array_id: int) -> dict[str, Any]:
        """Cancel every unfinished task of the array; returns the array with its counts."""
        return dict(self.request("POST", f"/api/v1/arrays/{array_id}/cancel/", {})[1])

    def events(self, job_id: int) -> list[dict[str, Any]]:
        return list(self.request("GET", f"/api/v1/jobs/{job_id}/events/", retry=True)[1])

    def logs(
        self,
        job_id: int,
        *,
        worker: int = 0,
        tail: int | None = None,
        since_seconds: int | None = None,
    ) -> dict[str, Any]:
        """{"job", "worker", "attempt", "lines", "truncated"}: the last lines of one worker of
        the job's current or last attempt."""
        query = {"worker": worker, "tail": tail, "since_seconds": since_seconds}
        return dict(self.request("GET", f"/api/v1/jobs/{job_id}/logs/", query=query, retry=True)[1])

    def follow_logs(
        self, job_id: int, *, worker: int = 0, tail: int = 100, interval: float = 2.0
    ) -> Iterator[str]:
        """The last `tail` lines, then each new line, until the job is final (its last lines
        included). Polls for the lines written since the previous read (with a margin) and
        skips those already yielded; a job not (yet, or again) running is waited for."""
        seen: list[str] = []
        attempt, last_read = None, None
        while True:
            job = self.job(job_id)  # first: once it is final, the read that follows is complete
            since = None if last_read is None else int(time.monotonic() - last_read) + 5
            try:
                body = self.logs(
                    job_id,
                    worker=worker,
                    tail=tail if since is None else MAX_TAIL,
                    since_seconds=since,
                )
            except ApiError as exc:
                # 404: not started, or requeued and between attempts; 409: still starting.
                if exc.status not in (404, 409) or job["state"] in FINAL_STATES:
                    raise
            else:
                if body["attempt"] != attempt:
                    seen, attempt = [], body["attempt"]
                fresh = after_overlap(seen, body["lines"])
                yield from fresh
                seen = (seen + fresh)[-MAX_TAIL:]
                last_read = time.monotonic()
            if job["state"] in FINAL_STATES:
                return
            time.sleep(interval)

    def wait(
        self,
        job_id: int,
        *,
        timeout: float | None = None,
        interval: float = 2.0,
        on_change: Any = None,
    ) -> dict[str, Any]:
        """Poll until the job is final (or `timeout` passes: TimeoutError)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        while True:
            job = self.job(job_id)
            if on_change is not None and (job["state"], job.get("pending_reason_text")) != last:
                on_change(job)
                last = (job["state"], job.get("pending_reason_text"))
            if job["state"] in FINAL_STATES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {job['state']}")
            time.sleep(interval)

    def me(self) -> dict[str, Any]:
        return dict(self.request("GET", "/api/v1/me/", retry=True)[1])


def after_overlap(seen: list[str], lines: list[str]) -> list[str]:
    """The part of `lines` after its longest start that repeats the end of `seen` (a polling
    window overlaps the previous one). Identical lines can make it skip too few or too many:
    logs carry no line numbers to tell them apart."""
    if not lines:
        return lines
    for i in range(max(0, len(seen) - len(lines)), len(seen)):  # the longest overlap first
        if seen[i] == lines[0] and seen[i:] == lines[: len(seen) - i]:
            return lines[len(seen) - i :]
    return lines


def _backoff(attempt: int, retry_after: str | None) -> float:
    if retry_after:
        try:
            return min(float(retry_after), 60.0)
        except ValueError:
            pass
    return min(0.5 * 2**attempt, 8.0)


def _error(status: int, raw: bytes) -> ApiError:
    try:
        error = json.loads(raw)["error"]
        return ApiError(
            status, error.get("code", "error"), error.get("message", ""), error.get("fields")
        )
    except (ValueError, KeyError, TypeError):
        return ApiError(status, "error", raw.decode(errors="replace")[:500])
