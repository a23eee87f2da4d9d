"""Idle GPUs, the pure part: the simulated utilization profile, the idle rule, and the words
an owner reads (standard library only)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

# The simulated cluster's stand-in for DCGM: comma-separated GPU utilization percentages, one
# per PROFILE_STEP of the attempt's run, the last holding to the end ("85,85,2": busy for
# 20 minutes, then idle).
PROFILE_ANNOTATION = "gpuqueue.dev/sim-gpu-utilization"
PROFILE_STEP = timedelta(minutes=10)
MAX_PROFILE_STEPS = 144


def profile_errors(value: str) -> list[str]:
    parts = value.split(",")
    if len(parts) > MAX_PROFILE_STEPS:
        return [f"Annotation {PROFILE_ANNOTATION}: at most {MAX_PROFILE_STEPS} steps."]
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if not numbers or not all(math.isfinite(n) and 0 <= n <= 100 for n in numbers):
        return [
            f"Annotation {PROFILE_ANNOTATION} must be percentages from 0 to 100 separated by "
            f"commas, e.g. '85,85,2'; got {value[:40]!r}."
        ]
    return []


def profile_utilization(value: str, elapsed: timedelta) -> float | None:
    """The profile's utilization `elapsed` into the run; None for a malformed profile."""
    if profile_errors(value):
        return None
    steps = [float(p) for p in value.split(",")]
    index = max(0, int(elapsed / PROFILE_STEP))
    return steps[min(index, len(steps) - 1)]


@dataclass(frozen=True, slots=True)
class IdleRule:
    threshold_percent: float
    minutes: float


def below_since(
    previous: datetime | None, utilization: float, rule: IdleRule, now: datetime
) -> datetime | None:
    """Since when the job has stayed below the threshold: kept while it stays below, started
    at `now` when it drops below, cleared by any reading at or above it."""
    if utilization >= rule.threshold_percent:
        return None
    return previous or now


def is_idle(since: datetime | None, rule: IdleRule, now: datetime) -> bool:
    return since is not None and now - since >= timedelta(minutes=rule.minutes)


def idle_words(gpus: int, threshold_percent: float, since: datetime, now: datetime) -> str:
    """What the owner reads: "its 8 GPUs have been below 5 % for 47 min"."""
    minutes = max(0, int((now - since).total_seconds() // 60))
    span = f"{minutes} min" if minutes < 120 else f"{minutes / 60:.1f} h"
    subject = "its GPU has" if gpus == 1 else f"its {gpus} GPUs have"
    return f"{subject} been below {threshold_percent:g} % utilization for {span}"
