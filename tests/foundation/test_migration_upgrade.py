"""A database migrated when migrations 0010-0012 landed as empty placeholders upgrades: their
work lives in later migrations, which such a database has not applied yet."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder

BEFORE = ("gpuqueue", "0009_job_workload_spec")
LANDED_EMPTY = ["0010_usage_ledger", "0011_job_arrays_and_dependencies", "0012_runtime_history"]
NEW_TABLES = {"gpuqueue_usagerecord", "gpuqueue_jobarray", "gpuqueue_jobdependency"}


def tables() -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.table_names(cursor))


def migrate(targets: list[tuple[str, str]]) -> None:
    MigrationExecutor(connection).migrate(targets)


@pytest.mark.django_db(transaction=True)
def test_a_database_at_the_landed_placeholders_gets_the_new_tables() -> None:
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("gpuqueue")
    assert tables() >= NEW_TABLES
    try:
        # A database migrated when the placeholders landed: the schema of 0009, and 0010-0012
        # recorded as applied (they were empty then).
        migrate([BEFORE])
        assert not NEW_TABLES & tables()
        recorder = MigrationRecorder(connection)
        for name in LANDED_EMPTY:
            recorder.record_applied("gpuqueue", name)
    finally:
        migrate(latest)
    assert tables() >= NEW_TABLES
    with connection.cursor() as cursor:  # the ledger's totals trigger came with them
        cursor.execute("SELECT 1 FROM pg_trigger WHERE tgname = 'usage_total_change'")
        assert cursor.fetchone() is not None
