from django.db import migrations, models


class Migration(migrations.Migration):
    """The proof of what gpuqueue made: the install's identity and one record per launched
    attempt (gpuqueue/cluster/proof.py)."""

    dependencies = [
        ("gpuqueue", "0017_forecast_sample"),
    ]

    operations = [
        migrations.CreateModel(
            name="Install",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("instance", models.CharField(max_length=63)),
                ("uid", models.UUIDField(unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
        ),
        migrations.CreateModel(
            name="WorkloadRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("job_id", models.BigIntegerField()),
                ("attempt", models.PositiveIntegerField()),
                ("namespace", models.CharField(max_length=63)),
                ("nonce", models.CharField(max_length=64)),
                ("secret_uid", models.CharField(blank=True, max_length=64)),
                ("job_uid", models.CharField(blank=True, max_length=64)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job_id", "attempt"), name="one_record_per_attempt"
                    )
                ],
            },
        ),
    ]
