import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    """A flavor's security profile: the uid, gid and volume group its workers run as, and
    whether root is allowed. Existing flavors keep the restricted default."""

    dependencies = [
        ("gpuqueue", "0018_workload_proof"),
    ]

    operations = [
        migrations.AddField(
            model_name="flavor",
            name="run_as_user",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="the uid workers run as; empty: the image's (0 needs allow root)",
                null=True,
                validators=[django.core.validators.MaxValueValidator(2147483647)],
            ),
        ),
        migrations.AddField(
            model_name="flavor",
            name="run_as_group",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="the primary gid workers run as; empty: the image's",
                null=True,
                validators=[django.core.validators.MaxValueValidator(2147483647)],
            ),
        ),
        migrations.AddField(
            model_name="flavor",
            name="fs_group",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="the group that owns the workers' volumes, so that they can write to "
                "them",
                null=True,
                validators=[django.core.validators.MaxValueValidator(2147483647)],
            ),
        ),
        migrations.AddField(
            model_name="flavor",
            name="allow_root",
            field=models.BooleanField(
                default=False,
                help_text="let workers run as root (needs a namespace whose Pod Security level "
                "is baseline or privileged)",
            ),
        ),
        migrations.AddConstraint(
            model_name="flavor",
            constraint=models.CheckConstraint(
                condition=models.Q(("run_as_user", 0), _negated=True)
                | models.Q(("allow_root", True)),
                name="flavor_root_only_when_allowed",
            ),
        ),
    ]
