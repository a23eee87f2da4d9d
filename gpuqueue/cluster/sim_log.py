"""What a simulated worker writes to its log: a start line, one training step per second of run
time, and its exit. Derived from the job, worker, attempt and clock alone, so that reading it
twice gives the same lines and the dashboard and the CLI have something real to follow.

Pure: no Django, no database.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuqueue.cluster.base import LogQuery, WorkerLog

STEP = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class SimulatedRun:
    job_id: int
    attempt: int
    worker: int
    workers: int
    ready_at: datetime  # when the worker started running
    ends_at: datetime
    exit_code: int
    prior_steps: int = 0  # what a checkpoint of an earlier attempt covered: numbering goes on


def loss(run: SimulatedRun, step: int) -> float:
    """A falling curve with jitter that depends on the job, the worker and the step only (an
    attempt that resumes continues the same curve)."""
    jitter = ((run.job_id * 7919 + run.worker * 104729 + step * 2654435761) % 1000) / 20000
    return 2.5 / (1 + 0.05 * step) + jitter


def _line(run: SimulatedRun, index: int, steps: int, ended: bool) -> str:
    """Line `index` of the log: 0 the start (at ready_at), 1..steps the steps (one a second),
    steps + 1 the exit (at ends_at)."""
    if index == 0:
        resumed = f", resuming after step {run.prior_steps}" if run.prior_steps else ""
        return (
            f"worker {run.worker} of {run.workers}: attempt {run.attempt} of job {run.job_id} "
            f"started{resumed}"
        )
    if index <= steps:
        step = run.prior_steps + index
        return f"step {step} loss {loss(run, step):.4f}"
    assert ended and index == steps + 1
    return f"worker {run.worker} exited with code {run.exit_code}"


def _first_since(run: SimulatedRun, cutoff: datetime, steps: int, ended: bool) -> int:
    """The index of the first line written at or after `cutoff` (steps are one a second)."""
    if cutoff <= run.ready_at:
        return 0
    first = math.ceil((cutoff - run.ready_at) / STEP)
    if first <= steps:
        return first
    exit_line = steps + 1
    if ended and run.ends_at >= cutoff:
        return exit_line  # only the exit line is that recent
    return exit_line + int(ended)  # no line is: past the last one


def simulated_log(run: SimulatedRun, now: datetime, query: LogQuery) -> WorkerLog:
    """The log as it stands at `now`, cut as Kubernetes cuts one: lines since `since_seconds`,
    then the last `tail_lines`, then the first `limit_bytes` of those."""
    if now < run.ready_at:
        return WorkerLog(lines=())
    ran = min(now, run.ends_at) - run.ready_at
    steps = int(ran / STEP)
    ended = now >= run.ends_at
    count = 1 + steps + (1 if ended else 0)
    first = 0
    if query.since_seconds is not None:
        first = _first_since(run, now - timedelta(seconds=query.since_seconds), steps, ended)
    if query.tail_lines is not None:
        first = max(first, count - query.tail_lines)
    lines, size, truncated = [], 0, False
    for index in range(first, count):
        text = _line(run, index, steps, ended)
        size += len(text.encode()) + 1
        if query.limit_bytes is not None and size > query.limit_bytes:
            truncated = True
            break
        lines.append(text)
    return WorkerLog(lines=tuple(lines), truncated=truncated)
