# Job arrays and dependencies; written by hand.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0013_usage_ledger_tables"),
        ("teams", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="JobArray",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=63)),
                (
                    "spec",
                    models.CharField(
                        help_text="the indices as given, e.g. 0-999:2%50", max_length=200
                    ),
                ),
                ("size", models.PositiveIntegerField(help_text="how many tasks")),
                (
                    "max_concurrent",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="the most tasks holding GPUs at once; null: no cap",
                        null=True,
                    ),
                ),
                (
                    "values",
                    models.JSONField(blank=True, default=list, help_text="one per task, or none"),
                ),
                ("idempotency_key", models.CharField(blank=True, max_length=200, null=True)),
                ("submitted_at", models.DateTimeField(auto_now_add=True)),
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
            options={"ordering": ["-submitted_at", "-id"]},
        ),
        migrations.AddIndex(
            model_name="jobarray",
            index=models.Index(fields=["team", "-submitted_at"], name="jobarray_team_recent"),
        ),
        migrations.AddConstraint(
            model_name="jobarray",
            constraint=models.UniqueConstraint(
                condition=models.Q(("idempotency_key__isnull", False)),
                fields=("user", "idempotency_key"),
                name="jobarray_idempotency_key_per_user",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="array",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="tasks",
                to="gpuqueue.jobarray",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="array_index",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="hold",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "offered to the engine"),
                    ("dependencies", "waiting for the jobs it depends on"),
                    ("array_limit", "waiting for a slot under its array's limit"),
                ],
                default="",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="keep_if_unmet",
            field=models.BooleanField(default=False),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("hold", ""), _negated=True), fields=["hold"], name="job_held"
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(("array__isnull", False)),
                fields=("array", "array_index"),
                name="job_one_task_per_array_index",
            ),
        ),
        migrations.CreateModel(
            name="JobDependency",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("after_ok", "after it succeeds"),
                            ("after_any", "after it ends"),
                            ("after_not_ok", "after it fails or is cancelled"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "job",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="dependencies",
                        to="gpuqueue.job",
                    ),
                ),
                (
                    "upstream",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="dependents",
                        to="gpuqueue.job",
                    ),
                ),
            ],
            options={"ordering": ["job", "upstream", "kind"]},
        ),
        migrations.AddConstraint(
            model_name="jobdependency",
            constraint=models.UniqueConstraint(
                fields=("job", "upstream", "kind"), name="one_dependency_per_kind"
            ),
        ),
        migrations.AddConstraint(
            model_name="jobdependency",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ["after_ok", "after_any", "after_not_ok"])),
                name="dependency_kind_valid",
            ),
        ),
    ]
