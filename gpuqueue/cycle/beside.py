"""Work of the cycle's that runs beside the rest of it, on a database connection of its own.

After a wave, launching is mostly this process's work and the backend's, and explaining is
mostly PostgreSQL's (writing tens of thousands of pending rows): run one after the other, the
user waits for both; run side by side, for the longer. The work started here must touch rows
the caller's work does not touch, and commit by itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection


def beside(work: Callable[[], None]) -> Callable[[], None]:
    """Start `work` on a thread with a connection of its own; returns the wait for it, which
    raises what `work` raised. Inside a transaction of the caller's (a test's), a second
    connection would not see what that transaction has not committed: `work` then runs at
    once, and the wait has nothing to wait for."""
    if connection.in_atomic_block:
        work()
        return lambda: None
    raised: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - raised again by the wait
            raised.append(exc)
        finally:
            connection.close()  # this thread's: one per call, not left open

    thread = threading.Thread(target=run, name="gpuqueue-cycle-beside", daemon=True)
    thread.start()

    def wait() -> None:
        thread.join()
        if raised:
            raise raised[0]

    return wait
