import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuqueue.settings")
application = get_wsgi_application()


def _warm() -> None:
    """Import at start what the first request would: the URL patterns with every view and
    serializer, and the Celery task a submission nudges. Lazily, they made each web worker's
    first request take about 0.6 s of CPU, all workers at once after a restart."""
    from django.urls import get_resolver

    from gpuqueue import tasks  # noqa: F401 - the import is the point

    get_resolver().url_patterns  # noqa: B018 - imports every urls module and view


_warm()
