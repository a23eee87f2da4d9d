# The change feed's trigger (migration 0021) watches `preempted_for` too: the feed reads it
# (gpuqueue/cycle/job_feed.py), so a change of it alone must mark the row. job_feed.WATCHED
# lists the same columns, and a test compares it with the trigger as installed.

from django.db import migrations

# Migration 0021's columns, as it left them.
BEFORE = (
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
WATCHED = (*BEFORE, "preempted_for")


def when(columns: tuple[str, ...]) -> list[str]:
    changed = " OR ".join(f"OLD.{column} IS DISTINCT FROM NEW.{column}" for column in columns)
    return [
        "DROP TRIGGER job_changed ON gpuqueue_job",
        f"CREATE TRIGGER job_changed BEFORE UPDATE ON gpuqueue_job FOR EACH ROW WHEN ({changed}) "
        "EXECUTE FUNCTION gpuqueue_job_changed()",
    ]


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0022_job_preempted_for"),
    ]

    operations = [migrations.RunSQL(when(WATCHED), when(BEFORE))]
