# The dashboard's job list (issue 6), measured by benchmarks/page_render.py with 100,000 jobs.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("gpuqueue", "0001_initial"),
    ]

    operations = [
        # Serves the jobs page: SELECT … FROM gpuqueue_job [JOIN memberships WHERE user_id = ?]
        # [AND state IN (…)] ORDER BY submitted_at DESC, id DESC LIMIT 51 OFFSET ?. Without it a
        # site admin's first page sorts every job (~190 ms at 100,000 jobs); with it the scan
        # stops after 51 rows (< 1 ms), and a member's page reads its newest rows in order.
        # Raw SQL rather than Meta.indexes because gpuqueue/models.py is not the dashboard's to
        # change; with no state operation the autodetector neither knows nor drops it.
        migrations.RunSQL(
            sql="CREATE INDEX IF NOT EXISTS job_recent ON gpuqueue_job "
            "(submitted_at DESC, id DESC)",
            reverse_sql="DROP INDEX IF EXISTS job_recent",
        ),
    ]
