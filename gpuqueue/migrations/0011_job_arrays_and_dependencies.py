# Placeholder for job arrays and dependencies (issue 20, parts 1 and 2); filled in by hand with the work it belongs to.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0010_usage_ledger"),
    ]

    operations = []
