"""The dashboard keeps no rows of its own: idle iron lives on gpuqueue.UtilizationSample."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0001_idle_iron_sample"),
        ("gpuqueue", "0007_utilization_sample_idle_iron"),
    ]

    operations = [migrations.DeleteModel(name="IdleIronSample")]
