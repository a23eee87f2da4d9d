from django.apps import AppConfig

from gpuqueue.core import caches


class GpuqueueConfig(AppConfig):
    name = "gpuqueue"
    verbose_name = "GPU queue"

    def ready(self) -> None:
        # Load the Celery app so that shared tasks sent from web processes use its broker.
        from gpuqueue import celery  # noqa: F401
        from gpuqueue.core import lookups  # noqa: F401  (registers `field__any`)
        from gpuqueue.models import Flavor, Node

        # Kept between requests (gpuqueue.core.caches): flavors by name
        # (gpuqueue.services.jobs.submit) and the largest node of each
        # (gpuqueue.services.cluster.inventory).
        caches.derives_from(Flavor, Node)
