from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('gpuqueue', '0017_forecast_sample'),
    ]

    operations = []
