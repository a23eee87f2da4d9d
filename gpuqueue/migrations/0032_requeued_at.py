# When a job last came back to PENDING after holding GPUs: a gang's patience for one domain of
# its preferred topology level counts from there. The change feed reads it, so its trigger
# watches it too (as migration 0030 leaves it, plus that column).

from importlib import import_module

from django.db import migrations, models

BEFORE = import_module("gpuqueue.migrations.0030_topology_levels").WATCHED
WATCHED = (*BEFORE, "requeued_at")
_trigger = import_module("gpuqueue.migrations.0030_topology_levels")._trigger


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0031_dra_sharing"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="requeued_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(_trigger(WATCHED), _trigger(BEFORE)),
    ]
