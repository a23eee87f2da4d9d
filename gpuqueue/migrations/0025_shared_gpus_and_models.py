# Shared GPUs and GPU models: a flavor may be shared (slices of one GPU per job), a node tells
# its GPU model, and a job may ask a fraction of one GPU, only some models, and keeps the
# devices its workers were packed on. The change feed reads the job's three new columns, so
# its trigger watches them too (as migration 0024 leaves it, plus those three).

from importlib import import_module

import django.contrib.postgres.fields
from django.conf import settings
from django.db import migrations, models

BEFORE = import_module("gpuqueue.migrations.0024_node_resources").WATCHED
WATCHED = (*BEFORE, "gpu_milli", "gpu_models", "gpu_devices")


def _trigger(watched: tuple[str, ...]) -> list[str]:
    changed = " OR ".join(f"OLD.{column} IS DISTINCT FROM NEW.{column}" for column in watched)
    return [
        "DROP TRIGGER job_changed ON gpuqueue_job",
        f"CREATE TRIGGER job_changed BEFORE UPDATE ON gpuqueue_job FOR EACH ROW WHEN ({changed}) "
        "EXECUTE FUNCTION gpuqueue_job_changed()",
    ]


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0024_node_resources"),
        ("teams", "0002_team_allowed"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="flavor",
            name="gpu_memory_mib",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="memory of one GPU in MiB, when known: jobs may then ask GPU memory instead of a fraction",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="flavor",
            name="shareable",
            field=models.BooleanField(
                default=False, help_text="jobs may ask a fraction of one GPU (time-slicing or MPS)"
            ),
        ),
        migrations.AddField(
            model_name="flavor",
            name="slices_per_gpu",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="replicas the device plugin makes of each GPU, e.g. 4; only when shareable",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="gpu_devices",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="job",
            name="gpu_milli",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="job",
            name="gpu_models",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=63), blank=True, default=list, size=None
            ),
        ),
        migrations.AddField(
            model_name="node",
            name="gpu_model",
            field=models.CharField(blank=True, max_length=63),
        ),
        migrations.AddConstraint(
            model_name="flavor",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("shareable", False), ("slices_per_gpu__isnull", True)),
                    models.Q(
                        ("shareable", True),
                        ("slices_per_gpu__gte", 2),
                        ("slices_per_gpu__lte", 1000),
                    ),
                    _connector="OR",
                ),
                name="flavor_slices_only_when_shareable",
            ),
        ),
        migrations.AddConstraint(
            model_name="flavor",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("gpu_memory_mib__isnull", True), ("gpu_memory_mib__gte", 1), _connector="OR"
                ),
                name="flavor_gpu_memory_positive",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("gpu_milli", 0),
                    models.Q(("gpu_milli__lte", 999), ("gpus_per_worker", 1)),
                    _connector="OR",
                ),
                name="job_gpu_milli_of_one_gpu",
            ),
        ),
        migrations.RunSQL(_trigger(WATCHED), _trigger(BEFORE)),
    ]
