"""When an array's waiting tasks should start and when the array should be done, from its
limit (%K) and its tasks' declared runtimes, the way a Slurm user reckons it: a task held by
the limit takes the slot of the task that frees one first.

1. Slots are held by the tasks holding GPUs (each frees its slot at its start plus its
   declared runtime) and by the pending tasks already offered to the engine (next in line:
   from their estimated start); a free slot is taken at once.
2. The held tasks, lowest index first, each take the slot that frees first; a slot whose
   occupant has no known end ranks after every known one, first taken first freed.
3. A task's start is known when its slot's end is; the array's finish when every unfinished
   task's end is.

Pure: plain values in and out, time passed in (the dashboard, the API and the CLI share it).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime, timedelta

HOLDING_STATES = frozenset({"ADMITTED", "RUNNING", "PREEMPTING"})
FINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


@dataclass(frozen=True, slots=True)
class Task:
    index: int
    state: str
    held: bool = False  # pending, held back by the array's limit
    started: datetime | None = None  # holding: when it started (or was admitted)
    estimated_start: datetime | None = None  # pending and offered: the engine's estimate
    runtime_seconds: int | None = None  # declared expected runtime


@dataclass(frozen=True, slots=True)
class TaskOutlook:
    index: int
    start: datetime | None  # None: not computable (a runtime is missing)
    after: int | None  # the task whose slot it takes; None: a free slot, or no limit


@dataclass(frozen=True)
class ArrayOutlook:
    next_start: datetime | None
    finish: datetime | None
    tasks: dict[int, TaskOutlook] = field(default_factory=dict)  # the pending tasks


def _end(start: datetime | None, runtime: int | None, now: datetime) -> datetime | None:
    if start is None or runtime is None:
        return None
    # A task past its declared runtime is taken to end any moment now, not in the past.
    return max(start + timedelta(seconds=runtime), now)


def outlook(tasks: list[Task], limit: int | None, now: datetime) -> ArrayOutlook:
    """The pending tasks' starts and the array's finish (see the module's steps)."""
    live = [t for t in tasks if t.state not in FINAL_STATES]
    ends: list[datetime | None] = []
    starts: dict[int, TaskOutlook] = {}
    seq = 0
    # A slot: (unknown end?, end timestamp, order taken, occupant index or None).
    slots: list[tuple[int, float, int, int | None]] = []

    def occupy(end: datetime | None, index: int | None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(slots, (0, end.timestamp(), seq, index) if end else (1, 0.0, seq, index))

    # 1. The slots taken now.
    holding = sorted(
        (t for t in live if t.state in HOLDING_STATES), key=lambda t: (t.started or now, t.index)
    )
    for t in holding:
        end = _end(t.started or now, t.runtime_seconds, now)
        ends.append(end)
        occupy(end, t.index)
    for t in sorted((t for t in live if t.state == "PENDING" and not t.held), key=_index):
        end = _end(t.estimated_start, t.runtime_seconds, now)
        ends.append(end)
        starts[t.index] = TaskOutlook(t.index, t.estimated_start, None)
        occupy(end, t.index)
    held = sorted((t for t in live if t.state == "PENDING" and t.held), key=_index)
    if limit is not None:
        for _ in range(max(limit - len(slots), 0)):
            occupy(now, None)  # free now: the next cycle offers a held task to the engine
    # 2. The held tasks, each in the first slot to free.
    for t in held:
        if not slots:  # no limit known: nothing to reckon by
            starts[t.index] = TaskOutlook(t.index, None, None)
            ends.append(None)
            continue
        unknown, stamp, _, occupant = heapq.heappop(slots)
        # A free slot: offered to the engine next cycle, when the GPUs decide its start.
        free = occupant is None
        start = None if unknown or free else datetime.fromtimestamp(stamp, tz=now.tzinfo)
        starts[t.index] = TaskOutlook(t.index, start, occupant)
        end = _end(start, t.runtime_seconds, now)
        ends.append(end)
        occupy(end, t.index)
    # 3. What is known.
    known = [o.start for o in starts.values() if o.start is not None]
    finish = max(ends) if ends and all(e is not None for e in ends) else None  # type: ignore[type-var]
    return ArrayOutlook(min(known) if known else None, finish, starts)


def _index(t: Task) -> int:
    return t.index


def throttle_sentence(index: int, size: int, limit: int, after: int | None) -> str:
    """'Task 12 of 100: the array runs 10 at a time; it starts as task 3 finishes.'"""
    head = f"Task {index} of {size}: the array runs {limit} at a time"
    if after is None:
        return f"{head}; it is next in line for a slot."
    return f"{head}; it starts as task {after} finishes."


def index_ranges(indices: list[int]) -> str:
    """Slurm's index list: [10, 11, 12, 20] -> '10-12,20'."""
    parts: list[str] = []
    ordered = sorted(set(indices))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def slurm_label(array_id: int, spec: str, pending: list[int], limit: int | None) -> str:
    """squeue's one line for an array's waiting tasks, '123_[10-99%10]'; once none waits,
    the array as submitted, '123_[0-99%10]'."""
    if not pending:
        return f"{array_id}_[{spec}]"
    cap = f"%{limit}" if limit else ""
    return f"{array_id}_[{index_ranges(pending)}{cap}]"
