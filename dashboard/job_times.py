"""How long a job waited and ran, and the GPU-hours it held: what a researcher scans the job
list for (squeue's TIME, sacct's elapsed and GPU-hours). Pure: a job's timestamps and now."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def waited_seconds(job: Any, now: datetime) -> float:
    """From submission to the first start (so far, while it has not started)."""
    until = job.admitted_at or job.started_at or job.finished_at or now
    return max((until - job.submitted_at).total_seconds(), 0.0)


def elapsed_seconds(job: Any, now: datetime) -> float | None:
    """Since it started holding GPUs, until it finished; None before that. (A requeued job's
    latest attempt.)"""
    start = job.started_at or job.admitted_at
    if start is None:
        return None
    return max(((job.finished_at or now) - start).total_seconds(), 0.0)


def gpu_hours(job: Any, now: datetime) -> float | None:
    elapsed = elapsed_seconds(job, now)
    if elapsed is None:
        return None
    return job.workers * job.gpus_per_worker * elapsed / 3600
