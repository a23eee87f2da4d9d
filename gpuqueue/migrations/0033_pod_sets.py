# A user's PyTorchJob or RayJob whose pod sets ask different GPUs per pod: its pod sets, and
# each pod's node once admitted (gpuqueue/services/jobs/pod_sets.py). The change feed reads
# both, so its trigger watches them too (as migration 0032 leaves it, plus those columns).

from importlib import import_module

from django.db import migrations, models

BEFORE = import_module("gpuqueue.migrations.0032_requeued_at").WATCHED
WATCHED = (*BEFORE, "pod_sets", "pod_nodes")
_trigger = import_module("gpuqueue.migrations.0030_topology_levels")._trigger


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0032_requeued_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="pod_sets",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="pod_nodes",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunSQL(_trigger(WATCHED), _trigger(BEFORE)),
    ]
