"""Idle iron moves onto the cluster's utilization rows (it was dashboard.IdleIronSample)."""

from django.db import migrations, models

COPY = """
UPDATE gpuqueue_utilizationsample AS u
   SET free = i.free, waiting_fit = i.waiting_fit
  FROM dashboard_idleironsample AS i
 WHERE u.team_id IS NULL AND u.flavor_id = i.flavor_id AND u.at = i.at
"""


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0006_flavor_cpu_and_memory_per_gpu"),
        ("dashboard", "0001_idle_iron_sample"),
    ]

    operations = [
        migrations.AddField(
            model_name="utilizationsample",
            name="free",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="utilizationsample",
            name="waiting_fit",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunSQL(COPY, reverse_sql=migrations.RunSQL.noop),
    ]
