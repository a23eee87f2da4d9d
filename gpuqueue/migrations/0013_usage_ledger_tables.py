"""The GPU-hours ledger (UsageRecord), per-job GPU activity (JobActivity) and each flavor's
idle-GPU settings."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# Every change to a ledger row appends its difference to gpuqueue_usagetotal (models.UsageTotal),
# then the rows already in the ledger are counted once.
USAGE_TOTAL_TRIGGERS = [
    """
CREATE FUNCTION gpuqueue_usage_total_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        IF TG_OP = 'UPDATE' AND NEW.team_id = OLD.team_id AND NEW.flavor_id = OLD.flavor_id
           AND NEW.gpu_seconds = OLD.gpu_seconds AND NEW.idle_gpu_seconds = OLD.idle_gpu_seconds
           AND (NEW.outcome = 'preempted') = (OLD.outcome = 'preempted') THEN
            RETURN NULL;  -- the minute's rewrite of an hour already whole: nothing changed
        END IF;
        INSERT INTO gpuqueue_usagetotal
            (team_id, flavor_id, gpu_seconds, preempted_gpu_seconds, idle_gpu_seconds)
        VALUES (OLD.team_id, OLD.flavor_id, -OLD.gpu_seconds,
                CASE WHEN OLD.outcome = 'preempted' THEN -OLD.gpu_seconds ELSE 0 END,
                -OLD.idle_gpu_seconds);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        INSERT INTO gpuqueue_usagetotal
            (team_id, flavor_id, gpu_seconds, preempted_gpu_seconds, idle_gpu_seconds)
        VALUES (NEW.team_id, NEW.flavor_id, NEW.gpu_seconds,
                CASE WHEN NEW.outcome = 'preempted' THEN NEW.gpu_seconds ELSE 0 END,
                NEW.idle_gpu_seconds);
    END IF;
    RETURN NULL;
END
$$
""",
    """
CREATE TRIGGER usage_total_change AFTER INSERT OR UPDATE OR DELETE ON gpuqueue_usagerecord
    FOR EACH ROW EXECUTE FUNCTION gpuqueue_usage_total_change()
""",
    """
INSERT INTO gpuqueue_usagetotal
    (team_id, flavor_id, gpu_seconds, preempted_gpu_seconds, idle_gpu_seconds)
SELECT team_id, flavor_id, SUM(gpu_seconds),
       SUM(CASE WHEN outcome = 'preempted' THEN gpu_seconds ELSE 0 END), SUM(idle_gpu_seconds)
FROM gpuqueue_usagerecord GROUP BY team_id, flavor_id
""",
]
DROP_USAGE_TOTAL_TRIGGERS = [
    "DROP TRIGGER usage_total_change ON gpuqueue_usagerecord",
    "DROP FUNCTION gpuqueue_usage_total_change()",
]


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0012_runtime_history"),
        ("teams", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="flavor",
            name="idle_threshold_percent",
            field=models.FloatField(
                blank=True,
                null=True,
                help_text="a job below this GPU utilization is idle; empty: default",
            ),
        ),
        migrations.AddField(
            model_name="flavor",
            name="idle_minutes",
            field=models.PositiveIntegerField(
                blank=True,
                null=True,
                help_text="for this long before it is flagged; empty: default",
            ),
        ),
        migrations.AddField(
            model_name="flavor",
            name="idle_policy",
            field=models.CharField(
                choices=[
                    ("flag", "only flag"),
                    ("reclaim_first", "flag; reclaim idle borrowers first"),
                ],
                default="flag",
                max_length=16,
            ),
        ),
        migrations.CreateModel(
            name="UsageRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("job_id", models.BigIntegerField()),
                ("attempt", models.PositiveIntegerField()),
                ("hour", models.DateTimeField(help_text="the start of the clock hour (UTC)")),
                ("gpus", models.PositiveIntegerField()),
                ("gpu_seconds", models.FloatField(help_text="GPUs × seconds held within the hour")),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("", "Open"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("cancelled", "Cancelled"),
                            ("preempted", "Preempted"),
                            ("requeued", "Requeued"),
                        ],
                        max_length=16,
                    ),
                ),
                ("used_gpu_seconds", models.FloatField(blank=True, null=True)),
                ("idle_gpu_seconds", models.FloatField(default=0.0)),
                (
                    "flavor",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="gpuqueue.flavor",
                    ),
                ),
                (
                    "team",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="teams.team",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["hour", "job_id", "attempt"],
                "indexes": [
                    models.Index(fields=["hour", "team"], name="usage_hour_team"),
                    models.Index(fields=["team", "hour"], name="usage_team_hour"),
                    models.Index(fields=["user", "hour"], name="usage_user_hour"),
                    models.Index(
                        condition=models.Q(("outcome", "")), fields=["job_id"], name="usage_open"
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job_id", "attempt", "hour"),
                        name="one_usage_record_per_attempt_hour",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("gpu_seconds__gte", 0)), name="usage_seconds_nonneg"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="JobActivity",
            fields=[
                (
                    "job",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="gpuqueue.job",
                    ),
                ),
                ("attempt", models.PositiveIntegerField()),
                (
                    "gpu_utilization",
                    models.FloatField(help_text="percent, mean over the job's GPUs"),
                ),
                ("measured_at", models.DateTimeField()),
                ("source", models.CharField(help_text="prometheus or simulated", max_length=16)),
                ("below_since", models.DateTimeField(blank=True, null=True)),
                (
                    "idle",
                    models.BooleanField(
                        default=False, help_text="below the threshold for long enough"
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["idle"], name="jobactivity_idle")],
            },
        ),
        migrations.CreateModel(
            name="UsageTotal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("gpu_seconds", models.FloatField()),
                ("preempted_gpu_seconds", models.FloatField()),
                ("idle_gpu_seconds", models.FloatField()),
                (
                    "flavor",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="gpuqueue.flavor",
                    ),
                ),
                (
                    "team",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="teams.team",
                    ),
                ),
            ],
        ),
        migrations.RunSQL(USAGE_TOTAL_TRIGGERS, reverse_sql=DROP_USAGE_TOTAL_TRIGGERS),
    ]
