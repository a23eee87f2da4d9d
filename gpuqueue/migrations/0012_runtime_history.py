# Placeholder for runtime prediction from history (issue 23); filled in by hand with the work it belongs to.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("gpuqueue", "0011_job_arrays_and_dependencies"),
    ]

    operations = []
