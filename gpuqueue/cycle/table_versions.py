"""Values read from nodes, flavors, quotas and teams, kept while those tables are unchanged.

Triggers move a counter per table on every row inserted, deleted or changed (migration 0016:
`gpuqueue_table_version`), so one small query tells whether the 5,000 nodes a cycle read last
time are still the nodes: reading them again through the ORM was a fifth of a steady cycle.
The counters are read before the values, so a value is never kept under a version newer than
itself (`gpuqueue.core.caches`' rule); it is kept once its transaction commits (a transaction
that wrote these tables and rolled back must not leave what it saw), for at most ten minutes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import connection, transaction

from gpuqueue.core import caches

T = TypeVar("T")

_kept: caches.Kept[str, Any] = caches.Kept(
    max_entries=None, max_age_seconds=caches.CYCLE_MAX_AGE_SECONDS
)


def table_versions() -> tuple[tuple[str, int], ...]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, version FROM gpuqueue_table_version ORDER BY name")
        return tuple(cursor.fetchall())


def kept_while_tables_unchanged(key: str, load: Callable[[], T]) -> T:
    """`load()`, or what it returned last time if no versioned table changed since."""
    if not caches.enabled():
        return load()
    versions = table_versions()
    value = _kept.get(key, versions)
    if value is None:
        value = load()
        transaction.on_commit(lambda: _kept.put(key, versions, value))
    return value  # type: ignore[no-any-return]
