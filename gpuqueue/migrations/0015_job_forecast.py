# Runtime prediction from history: the history itself is the finished jobs'
# rows (services/forecasts/runtime_history.py); this stores the last forecast on each job
# (the estimated start's band and the runtime prediction it used).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0014_job_arrays_and_dependency_tables"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="forecast",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
