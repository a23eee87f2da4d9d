from django.db import migrations, models


class Migration(migrations.Migration):
    """GPUs that gpuqueue's own terminating pods still hold on a node, by job: they come back
    to the job they were taken for instead of counting as used by others."""

    dependencies = [
        ("gpuqueue", "0019_flavor_security_profile"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="draining",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
