import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0007_utilization_sample_idle_iron"),
        ("teams", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="FairShare",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("gpus", models.PositiveIntegerField()),
                ("planned_at", models.DateTimeField()),
                (
                    "flavor",
                    models.ForeignKey(
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
            options={
                "ordering": ["team__slug", "flavor__name"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("team", "flavor"), name="one_fair_share_per_team"
                    )
                ],
            },
        ),
    ]
