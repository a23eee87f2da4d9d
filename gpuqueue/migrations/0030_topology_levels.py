# Topology levels: a flavor's node label keys, outermost first; a job's level (required or
# preferred) and the domain its gang was placed in. The change feed reads the job's level, so
# its trigger watches those two columns too (as migration 0025 leaves it, plus those).

from importlib import import_module

from django.db import migrations, models

BEFORE = import_module("gpuqueue.migrations.0025_shared_gpus_and_models").WATCHED
WATCHED = (*BEFORE, "topology_level", "topology_required")
_trigger = import_module("gpuqueue.migrations.0025_shared_gpus_and_models")._trigger


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0029_job_sources"),
    ]

    operations = [
        migrations.AddField(
            model_name="flavor",
            name="topology_levels",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text='node label keys, outermost first, e.g. ["network.topology.nvidia.com/spine", "example.com/rack", "nvidia.com/gpu.clique", "kubernetes.io/hostname"]',
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="placement_domain",
            field=models.CharField(blank=True, default="", max_length=400),
        ),
        migrations.AddField(
            model_name="job",
            name="topology_level",
            field=models.CharField(blank=True, default="", max_length=317),
        ),
        migrations.AddField(
            model_name="job",
            name="topology_required",
            field=models.BooleanField(default=False),
        ),
        migrations.RunSQL(_trigger(WATCHED), _trigger(BEFORE)),
    ]
