"""PostgreSQL advisory locks that make cluster-wide singletons."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

# One place for the keys, so two singletons never share one by accident.
LOCK_KEYS = {
    "admission_cycle": 7_301_001,
    "cluster_sync": 7_301_002,
    "launching": 7_301_003,
}


def try_xact_lock(name: str) -> bool:
    """Take the named lock until the current transaction ends; False if another holds it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEYS[name]])
        return bool(cursor.fetchone()[0])


@contextmanager
def shared_session_lock(name: str) -> Iterator[None]:
    """Hold the named lock, shared with other holders, while the block runs (and no longer:
    a process that dies lets go of it with its connection)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock_shared(%s)", [LOCK_KEYS[name]])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_shared(%s)", [LOCK_KEYS[name]])


def held_by_others(name: str) -> bool:
    """Whether another session holds the named lock now (it is not taken here)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEYS[name]])
        free = bool(cursor.fetchone()[0])
        if free:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEYS[name]])
    return not free
