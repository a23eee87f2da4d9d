# A pending job's reason and places in line move off the wide job row to a narrow row of their
# own (`Standing`), which the admission cycle rewrites for tens of thousands of jobs after a
# wave. The change feed's trigger never watched them, so it is left as it is.

import django.db.models.deletion
from django.db import migrations, models

COPY = """
INSERT INTO gpuqueue_standing (job_id, reason, queue_position, cluster_position)
SELECT id, pending_reason, queue_position, cluster_position FROM gpuqueue_job
WHERE state = 'PENDING'
  AND (pending_reason IS NOT NULL OR queue_position IS NOT NULL OR cluster_position IS NOT NULL)
"""
COPY_BACK = """
UPDATE gpuqueue_job j SET pending_reason = s.reason, queue_position = s.queue_position,
    cluster_position = s.cluster_position
FROM gpuqueue_standing s WHERE s.job_id = j.id
"""


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0033_pod_sets"),
    ]

    operations = [
        migrations.CreateModel(
            name="Standing",
            fields=[
                (
                    "job",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="standing",
                        serialize=False,
                        to="gpuqueue.job",
                    ),
                ),
                ("reason", models.JSONField(blank=True, null=True)),
                ("queue_position", models.PositiveIntegerField(blank=True, null=True)),
                ("cluster_position", models.PositiveIntegerField(blank=True, null=True)),
            ],
        ),
        migrations.RunSQL(COPY, COPY_BACK),
        migrations.RemoveField(model_name="job", name="pending_reason"),
        migrations.RemoveField(model_name="job", name="queue_position"),
        migrations.RemoveField(model_name="job", name="cluster_position"),
    ]
