"""The cycle's kept objects out of the garbage collector's way.

Between cycles the process keeps every active job's row and engine object (cycle/job_feed.py),
the world, the last plan and the predictions: about a million objects at 50,000 pending.
Python's cyclic collector walks all of them at each full collection, and a cycle's own
allocations (a wave's launches, tens of thousands of reasons) set one off in most busy cycles:
1.3 s each in launch and in explain, measured at 20,000 pending (`sum(range(10**6))` 59 ms),
a third of those phases. Once a cycle has read and planned, `freeze` moves everything alive
into the collector's permanent generation (`gc.freeze`: the objects stay, only the collector
skips them), so that later collections walk only what is new. A frozen object dropped is
still freed by its reference count; only garbage reference cycles wait for `release_when_due`,
which unfreezes everything and collects once, at most every RELEASE_SECONDS. Below
FREEZE_FROM active jobs a full collection is cheap, and nothing is frozen.
"""

from __future__ import annotations

import gc
import time

FREEZE_FROM = 5_000  # active jobs read by the cycle
RELEASE_SECONDS = 600.0  # as long as the cycle's kept rows last (caches.CYCLE_MAX_AGE_SECONDS)
_frozen_at: list[float] = []  # when the first freeze since the last release happened


def freeze(active_jobs: int) -> None:
    """Keep what is alive now out of collections, when the cycle keeps `active_jobs` rows."""
    if active_jobs < FREEZE_FROM:
        return
    if not _frozen_at:
        _frozen_at.append(time.monotonic())
    gc.freeze()


def release_when_due() -> None:
    """Unfreeze and collect once, if the first freeze is RELEASE_SECONDS old."""
    if _frozen_at and time.monotonic() - _frozen_at[0] >= RELEASE_SECONDS:
        _frozen_at.clear()
        gc.unfreeze()
        gc.collect()
