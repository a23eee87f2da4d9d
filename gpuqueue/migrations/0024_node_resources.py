# Nodes carry what a worker needs besides GPUs (allocatable CPU, memory and pods, and what pods
# gpuqueue did not create request of them); the change feed reads each job's CPU and memory
# requests, so its trigger watches them too (as migration 0023 leaves it, plus those two).

from importlib import import_module

from django.db import migrations, models

BEFORE = import_module("gpuqueue.migrations.0023_job_feed_trigger_preempted_for").WATCHED
WATCHED = (*BEFORE, "cpu_millicores", "memory_mib")


def _trigger(watched: tuple[str, ...]) -> list[str]:
    changed = " OR ".join(f"OLD.{column} IS DISTINCT FROM NEW.{column}" for column in watched)
    return [
        "DROP TRIGGER job_changed ON gpuqueue_job",
        f"CREATE TRIGGER job_changed BEFORE UPDATE ON gpuqueue_job FOR EACH ROW WHEN ({changed}) "
        "EXECUTE FUNCTION gpuqueue_job_changed()",
    ]


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0023_job_feed_trigger_preempted_for"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="allocatable_cpu_millicores",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="allocatable_memory_bytes",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="allocatable_pods",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="node",
            name="external_cpu_millicores",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="node",
            name="external_memory_bytes",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="node",
            name="external_pods",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunSQL(_trigger(WATCHED), _trigger(BEFORE)),
    ]
