# What changed since the admission cycle last looked (gpuqueue/cycle/job_feed.py and
# gpuqueue/cycle/table_versions.py), so that a cycle over tens of thousands of waiting jobs
# reads only those:
#
# - gpuqueue_job.changed_xact: the (64-bit) id of the transaction that last changed the row,
#   set by a trigger on every insert and on every update that changes something, indexed.
#   Writes that change only what pages show and the cycle keeps itself (reasons, positions,
#   forecasts) run with `gpuqueue.display_only` on and leave it alone.
# - gpuqueue_table_version: a counter per table, moved on by every row inserted, deleted or
#   changed in nodes, flavors, quotas and teams, and by every TRUNCATE of them.

from django.db import migrations

JOB_FEED = [
    "ALTER TABLE gpuqueue_job ADD COLUMN changed_xact bigint",
    "CREATE INDEX job_changed_xact ON gpuqueue_job (changed_xact)",
    """
CREATE FUNCTION gpuqueue_job_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        NEW.changed_xact := OLD.changed_xact;
        IF NEW IS NOT DISTINCT FROM OLD THEN
            RETURN NEW;  -- written as it was
        END IF;
    END IF;
    NEW.changed_xact := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END
$$
""",
    """
CREATE TRIGGER job_changed BEFORE INSERT OR UPDATE ON gpuqueue_job FOR EACH ROW
    WHEN (current_setting('gpuqueue.display_only', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION gpuqueue_job_changed()
""",
]
DROP_JOB_FEED = [
    "DROP TRIGGER job_changed ON gpuqueue_job",
    "DROP FUNCTION gpuqueue_job_changed()",
    "ALTER TABLE gpuqueue_job DROP COLUMN changed_xact",
]

VERSIONED = ["gpuqueue_node", "gpuqueue_flavor", "gpuqueue_quota", "teams_team"]
TABLE_VERSIONS = [
    "CREATE TABLE gpuqueue_table_version (name text PRIMARY KEY, version bigint NOT NULL)",
    "INSERT INTO gpuqueue_table_version VALUES "
    + ", ".join(f"('{table}', 0)" for table in VERSIONED),
    """
CREATE FUNCTION gpuqueue_table_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE gpuqueue_table_version SET version = version + 1 WHERE name = TG_TABLE_NAME;
    RETURN NULL;
END
$$
""",
    *(
        sql
        for table in VERSIONED
        for sql in (
            f"CREATE TRIGGER {table}_version_rows AFTER INSERT OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION gpuqueue_table_changed()",
            f"CREATE TRIGGER {table}_version_change AFTER UPDATE ON {table} FOR EACH ROW "
            "WHEN (OLD IS DISTINCT FROM NEW) EXECUTE FUNCTION gpuqueue_table_changed()",
            f"CREATE TRIGGER {table}_version_truncate AFTER TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION gpuqueue_table_changed()",
        )
    ),
]
DROP_TABLE_VERSIONS = [
    *(
        sql
        for table in VERSIONED
        for sql in (
            f"DROP TRIGGER {table}_version_rows ON {table}",
            f"DROP TRIGGER {table}_version_change ON {table}",
            f"DROP TRIGGER {table}_version_truncate ON {table}",
        )
    ),
    "DROP FUNCTION gpuqueue_table_changed()",
    "DROP TABLE gpuqueue_table_version",
]


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0015_job_forecast"),
        ("teams", "0001_initial"),
    ]

    operations = [
        migrations.RunSQL(JOB_FEED, DROP_JOB_FEED),
        migrations.RunSQL(TABLE_VERSIONS, DROP_TABLE_VERSIONS),
    ]
