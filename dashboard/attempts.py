"""A job's attempts read back from its timeline, and how long its current one has left: what
the job page shows a researcher watching a run. Pure: events (anything with the JobEvent
fields) and a job's fields in, plain data out."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dashboard.job_times import elapsed_seconds
from gpuqueue.client.exit_codes import without_prefix

HOLDING = ("ADMITTED", "RUNNING", "PREEMPTING")

# How an attempt ended, in the words of the page (the event's reason says why).
ENDINGS = {
    "PENDING": "requeued",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "CANCELLED": "cancelled",
}


@dataclass
class Attempt:
    number: int
    admitted_at: datetime
    placement: list[tuple[str, int]]  # (node, workers), by node name
    started_at: datetime | None = None
    ended_at: datetime | None = None
    ending: str = ""  # requeued / succeeded / failed / cancelled; "" while it holds GPUs
    why: str = ""  # the ending event's reason
    preempted: bool = False  # asked to checkpoint during this attempt

    @property
    def current(self) -> bool:
        return self.ended_at is None


def attempts_of(
    events: Iterable[Any], current_placement: dict[str, int] | None = None
) -> list[Attempt]:
    """Each admission opens an attempt (placement from the admission event's details); the
    first move to RUNNING starts it; the first move back to PENDING or to a final state ends
    it. Events in timeline order (at, id). An attempt still open whose admission recorded no
    placement takes the job's own (`current_placement`)."""
    out: list[Attempt] = []
    for event in events:
        open_ = out[-1] if out and out[-1].current else None
        if event.to_state == "ADMITTED" and event.from_state == "PENDING":
            placement = (event.details or {}).get("placement") or {}
            out.append(
                Attempt(
                    number=len(out) + 1,
                    admitted_at=event.at,
                    placement=sorted((str(n), int(w)) for n, w in placement.items()),
                )
            )
        elif open_ is None:
            continue
        elif event.to_state == "RUNNING" and open_.started_at is None:
            open_.started_at = event.at
        elif event.to_state == "PREEMPTING" and event.from_state != "PREEMPTING":
            open_.preempted = True
        elif event.to_state in ENDINGS and event.from_state in HOLDING:
            open_.ended_at = event.at
            open_.ending = ENDINGS[event.to_state]
            # The word is shown before it: "failed: exit code 137", not "failed: failed: …".
            open_.why = without_prefix(event.reason, open_.ending)
    if out and out[-1].current and not out[-1].placement and current_placement:
        out[-1].placement = sorted((str(n), int(w)) for n, w in current_placement.items())
    return out


@dataclass(frozen=True)
class Clock:
    """The current attempt's run time and, against a known runtime, what is left."""

    elapsed: float | None  # seconds since it started holding GPUs; None before
    limit: int | None  # seconds: the max runtime, else the submitter's expected runtime
    limit_kind: str  # "maximum runtime" / "expected runtime" / ""

    @property
    def remaining(self) -> float | None:
        if self.elapsed is None or self.limit is None:
            return None
        return self.limit - self.elapsed

    @property
    def over(self) -> bool:
        return self.remaining is not None and self.remaining < 0

    @property
    def percent(self) -> int | None:
        if self.elapsed is None or not self.limit:
            return None
        return min(100, int(100 * self.elapsed / self.limit))

    def ends_at(self, now: datetime) -> datetime | None:
        remaining = self.remaining
        return None if remaining is None else now + timedelta(seconds=remaining)


def clock_of(job: Any, now: datetime) -> Clock:
    if job.max_runtime_seconds:
        limit, kind = job.max_runtime_seconds, "maximum runtime"
    elif job.expected_runtime_seconds:
        limit, kind = job.expected_runtime_seconds, "expected runtime"
    else:
        limit, kind = None, ""
    return Clock(elapsed_seconds(job, now), limit, kind)
