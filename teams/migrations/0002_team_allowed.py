from django.db import migrations, models


class Migration(migrations.Migration):
    """What a team's jobs may use in its namespace. Existing teams start with empty lists: no
    ServiceAccount (the default one, without its token), no Secret, no claim."""

    dependencies = [
        ("teams", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="team",
            name="allowed_service_accounts",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text='ServiceAccounts jobs may run as, e.g. ["trainer"]',
            ),
        ),
        migrations.AddField(
            model_name="team",
            name="allowed_secrets",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="Secrets jobs may take variables or image pull credentials from, "
                'e.g. ["wandb", "ghcr-pull"]',
            ),
        ),
        migrations.AddField(
            model_name="team",
            name="allowed_claims",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text='PersistentVolumeClaims jobs may mount, e.g. ["imagenet", "scratch-*"]',
            ),
        ),
    ]
