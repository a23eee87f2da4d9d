"""PostgreSQL advisory locks that make cluster-wide singletons."""

from __future__ import annotations

from django.db import connection

# One place for the keys, so two singletons never share one by accident.
LOCK_KEYS = {
    "admission_cycle": 7_301_001,
    "cluster_sync": 7_301_002,
}


def try_xact_lock(name: str) -> bool:
    """Take the named lock until the current transaction ends; False if another holds it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEYS[name]])
        return bool(cursor.fetchone()[0])
