# An empty placeholder that landed on main and is recorded as applied in databases migrated then;
# so it stays empty, and its work is in 0013_usage_ledger_tables.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0009_job_workload_spec"),
    ]

    operations = []
