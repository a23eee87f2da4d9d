"""How callers run the engine: with the cyclic garbage collector paused.

A plan allocates one small object per decision (50,000 pending jobs: 50,000 results), which
triggers several full collections that walk every object of the snapshot, and the engine's
objects form no reference cycles to collect. Reference counting still frees everything as
usual; the collector runs again as soon as the block ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
