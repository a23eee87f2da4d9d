"""How many GPUs a team's running jobs hold that started before a given time.

A reason says how much of a waiting job's team share is held by jobs that started after it was
submitted (reasons.no_capacity): the team's newer, smaller jobs that take the share as it frees
are the real cause of a gang's wait, and nothing else names them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from itertools import accumulate

from gpuqueue.scheduler.model import RunningJob


class HeldBefore:
    """Per team and flavor, the running jobs' start times in order with the GPUs held so far.
    Built on the first question (only a plan that explains asks), from the snapshot's running
    jobs; jobs being preempted are left out, as the ledger's `in_use` leaves them out."""

    __slots__ = ("_index", "_running")

    def __init__(self, running: Iterable[RunningJob]) -> None:
        self._running = running
        self._index: dict[tuple[str, str], tuple[list[float], list[int]]] | None = None

    def gpus(self, team: str, flavor: str, at: float) -> int:
        """GPUs the team holds of the flavor in jobs started at or before `at`."""
        if self._index is None:
            self._index = self._build()
        entry = self._index.get((team, flavor))
        if entry is None:
            return 0
        starts, held = entry
        count = bisect_right(starts, at)
        return held[count - 1] if count else 0

    def _build(self) -> dict[tuple[str, str], tuple[list[float], list[int]]]:
        jobs: dict[tuple[str, str], list[tuple[float, int]]] = {}
        for job in self._running:
            if job.preempting_since is None:
                jobs.setdefault((job.team, job.flavor), []).append((job.started_at, job.gpus))
        index: dict[tuple[str, str], tuple[list[float], list[int]]] = {}
        for key, pairs in jobs.items():
            pairs.sort()
            index[key] = ([at for at, _ in pairs], list(accumulate(gpus for _, gpus in pairs)))
        return index
