# The change feed's trigger (migration 0016, gpuqueue/cycle/job_feed.py) marks a job row's
# `changed_xact` on insert, and on an update only when a column the feed reads and does not
# keep itself changed value: a WHEN clause over those columns. What pages alone read (the
# estimated start, the forecast, the message) never marks a row, and neither do the reasons
# and positions, which the feed reads but the cycle writes and remembers itself
# (`remember_shown`). job_feed.WATCHED lists the same columns, and a test compares it
# with the trigger as installed.
#
# WHEN over the values rather than UPDATE OF the columns: UPDATE OF fires for a column named
# in the SET list even when its value is the same, and Django's `save()` names every column.

from django.db import migrations

# The feed's columns (job_feed._COLUMNS) less the id, which never changes, and the ones the
# cycle keeps itself, as this migration leaves them.
WATCHED = (
    "state",
    "team_id",
    "user_id",
    "flavor_id",
    "workers",
    "gpus_per_worker",
    "placement",
    "priority",
    "preemptible",
    "submitted_at",
    "admitted_at",
    "max_runtime_seconds",
    "expected_runtime_seconds",
    "checkpoint_requested_at",
    "not_before",
    "hold",
    "attempts",
    "checkpoint_grace_seconds",
)
CHANGED = " OR ".join(f"OLD.{column} IS DISTINCT FROM NEW.{column}" for column in WATCHED)

BY_COLUMN = [
    "DROP TRIGGER job_changed ON gpuqueue_job",
    """
CREATE OR REPLACE FUNCTION gpuqueue_job_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.changed_xact := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END
$$
""",
    "CREATE TRIGGER job_inserted BEFORE INSERT ON gpuqueue_job FOR EACH ROW "
    "EXECUTE FUNCTION gpuqueue_job_changed()",
    f"CREATE TRIGGER job_changed BEFORE UPDATE ON gpuqueue_job FOR EACH ROW WHEN ({CHANGED}) "
    "EXECUTE FUNCTION gpuqueue_job_changed()",
]
# Back to migration 0016's trigger: every change marks the row unless the session says the
# writes are display-only.
BY_SESSION = [
    "DROP TRIGGER job_changed ON gpuqueue_job",
    "DROP TRIGGER job_inserted ON gpuqueue_job",
    """
CREATE OR REPLACE FUNCTION gpuqueue_job_changed() RETURNS trigger LANGUAGE plpgsql AS $$
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


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0020_node_draining"),
    ]

    operations = [migrations.RunSQL(BY_COLUMN, BY_SESSION)]
