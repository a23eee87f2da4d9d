import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuqueue.settings")
django.setup(set_prefix=False)  # as django.core.wsgi.get_wsgi_application does

from gpuqueue.handler import ApiWSGIHandler  # noqa: E402 - needs the apps loaded

# Django's WSGIHandler, with a shorter middleware chain for token API requests.
application = ApiWSGIHandler()
