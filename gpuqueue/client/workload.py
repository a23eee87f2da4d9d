"""The workload's side of gpuqueue's checkpoint protocol; the standard library only, so that any
training image can copy this one file in.

    from gpuqueue.client import workload
    workload.install_sigterm_hook()           # SIGTERM also counts as a request
    start = load(workload.resume_from())      # None on the first attempt
    for step in ...:
        train_one_step()
        if workload.checkpoint_requested():
            path = save()
            workload.acknowledge(path)        # gpuqueue requeues the job; it resumes from path
            sys.exit(0)

gpuqueue sets, in every worker: GPUQUEUE_URL, GPUQUEUE_JOB_ID, GPUQUEUE_JOB_TOKEN (valid for this
job alone), GPUQUEUE_ANNOTATIONS_FILE (the pod's annotations, through the downward API), and on a
resumed attempt GPUQUEUE_RESUME=1, GPUQUEUE_ATTEMPT and GPUQUEUE_CHECKPOINT.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from typing import Any

CHECKPOINT_ANNOTATION = "gpuqueue.dev/checkpoint-requested"
DEFAULT_ANNOTATIONS_FILE = "/etc/gpuqueue/podinfo/annotations"

_sigterm = threading.Event()


class AcknowledgeError(Exception):
    """gpuqueue refused the acknowledgement (bad token, unknown job) or could not be reached."""


def parse_annotations(text: str) -> dict[str, str]:
    """The downward API writes one `key="value"` per line, the value quoted as Go's %q does
    (JSON-compatible for what annotations hold)."""
    annotations: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        if not sep:
            continue
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw.strip('"')
        annotations[key.strip()] = str(value)
    return annotations


def _annotations_file(path: str | None) -> str:
    return path or os.environ.get("GPUQUEUE_ANNOTATIONS_FILE") or DEFAULT_ANNOTATIONS_FILE


def checkpoint_deadline(path: str | None = None) -> datetime | None:
    """When gpuqueue stops the job if no checkpoint is acknowledged; None when none is asked."""
    try:
        with open(_annotations_file(path), encoding="utf-8") as handle:
            value = parse_annotations(handle.read()).get(CHECKPOINT_ANNOTATION)
    except OSError:
        return None
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def checkpoint_requested(path: str | None = None) -> bool:
    """True once gpuqueue asked for a checkpoint (the annotation) or SIGTERM arrived (with the
    hook installed). Cheap enough to call every training step."""
    return _sigterm.is_set() or checkpoint_deadline(path) is not None


def install_sigterm_hook(callback: Callable[[], None] | None = None) -> None:
    """Treat SIGTERM (sent when the grace period starts, by gpuqueue or by a drained node) as a
    checkpoint request instead of dying at once; the pod has terminationGracePeriodSeconds."""

    def handler(signum: int, frame: Any) -> None:
        _sigterm.set()
        if callback is not None:
            callback()

    signal.signal(signal.SIGTERM, handler)


def resume_from() -> str | None:
    """The checkpoint this attempt resumes from, or None on a first attempt."""
    if os.environ.get("GPUQUEUE_RESUME") != "1":
        return None
    return os.environ.get("GPUQUEUE_CHECKPOINT") or None


def attempt() -> int:
    return int(os.environ.get("GPUQUEUE_ATTEMPT", "1") or 1)


def acknowledge(
    location: str,
    *,
    url: str | None = None,
    job_id: str | int | None = None,
    token: str | None = None,
    timeout: float = 10.0,
    attempts: int = 4,
    backoff: float = 1.0,
) -> bool:
    """Tell gpuqueue where the checkpoint is. True when it was recorded as the answer to a
    checkpoint request (also when this repeats an earlier acknowledgement), False when gpuqueue
    asked for none (the job is not being preempted; a running job's save is then registered
    all the same, as `register` does). Network errors and 5xx are retried; a refused token
    raises AcknowledgeError."""
    answer = _post_checkpoint(location, url, job_id, token, timeout, attempts, backoff)
    return answer is not None and bool(answer.get("acknowledged", True))


def register(
    location: str,
    *,
    url: str | None = None,
    job_id: str | int | None = None,
    token: str | None = None,
    timeout: float = 10.0,
    attempts: int = 4,
    backoff: float = 1.0,
) -> bool:
    """Tell gpuqueue about a save made at any time while the job runs (every N steps, or on
    SIGTERM when its node is drained): the newest one is what the next attempt resumes from,
    whatever ends this one. While the job is being preempted this is the acknowledgement.
    True when recorded, False when the job neither runs nor is being preempted."""
    answer = _post_checkpoint(location, url, job_id, token, timeout, attempts, backoff)
    return answer is not None and bool(answer.get("registered") or answer.get("acknowledged"))


def _post_checkpoint(
    location: str,
    url: str | None,
    job_id: str | int | None,
    token: str | None,
    timeout: float,
    attempts: int,
    backoff: float,
) -> dict[str, Any] | None:
    """POST the location; the answer's body, or None on 409 (nothing to record it for)."""
    url = (url or os.environ.get("GPUQUEUE_URL", "")).rstrip("/")
    job_id = job_id if job_id is not None else os.environ.get("GPUQUEUE_JOB_ID")
    token = token or os.environ.get("GPUQUEUE_JOB_TOKEN")
    if not (url and job_id and token):
        raise AcknowledgeError("GPUQUEUE_URL, GPUQUEUE_JOB_ID and GPUQUEUE_JOB_TOKEN must be set")
    request = urllib.request.Request(
        f"{url}/api/v1/jobs/{job_id}/checkpointed/",
        data=json.dumps({"location": location}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    last_error = ""
    for number in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                answer = json.loads(response.read() or b"{}")
                return answer if isinstance(answer, dict) else {}
        except urllib.error.HTTPError as exc:
            if exc.code == 409:
                return None
            if exc.code < 500 and exc.code != 429:
                raise AcknowledgeError(
                    f"HTTP {exc.code}: {exc.read().decode(errors='replace')}"
                ) from exc
            last_error = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last_error = str(exc)
        if number < attempts:
            time.sleep(backoff * 2 ** (number - 1))
    raise AcknowledgeError(f"gpuqueue could not be reached: {last_error}")
