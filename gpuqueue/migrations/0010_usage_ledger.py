# Placeholder for the GPU-hours ledger and idle-GPU findings (issue 20, parts 3 and 4); filled in by hand with the work it belongs to.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0009_job_workload_spec"),
    ]

    operations = []
