from typing import Any

from django.db import migrations, models


def fill_preempted_for(apps: Any, schema_editor: Any) -> None:
    """Jobs PREEMPTING now keep the job they were preempted for, read from the details of
    their last move into PREEMPTING, so that an upgrade in the middle of a preemption keeps
    its promise of the GPUs. A job preempted for no job (a node drain) keeps none."""
    Job = apps.get_model("gpuqueue", "Job")
    JobEvent = apps.get_model("gpuqueue", "JobEvent")
    preempting = Job.objects.filter(state="PREEMPTING").values_list("pk", flat=True)
    events = (
        JobEvent.objects.filter(job_id__in=list(preempting), to_state="PREEMPTING")
        .exclude(from_state="PREEMPTING")
        .order_by("job_id", "-at", "-id")
        .values_list("job_id", "details")
    )
    seen: set[int] = set()
    for job_id, details in events:
        if job_id in seen:
            continue
        seen.add(job_id)
        for_job = (details or {}).get("for_job")
        if isinstance(for_job, int):
            Job.objects.filter(pk=job_id, state="PREEMPTING").update(preempted_for=for_job)


class Migration(migrations.Migration):
    """The job a PREEMPTING job was preempted for, on the job's row: the cycle's snapshot
    reads it with the job's row."""

    dependencies = [
        ("gpuqueue", "0021_job_feed_trigger_by_column"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="preempted_for",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(fill_preempted_for, migrations.RunPython.noop),
    ]
