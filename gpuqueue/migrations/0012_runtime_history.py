# An empty placeholder that landed on main and is recorded as applied in databases migrated then;
# so it stays empty, and its work is in 0015_job_forecast.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0011_job_arrays_and_dependencies"),
    ]

    operations = []
