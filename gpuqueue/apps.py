from django.apps import AppConfig


class GpuqueueConfig(AppConfig):
    name = "gpuqueue"
    verbose_name = "GPU queue"

    def ready(self) -> None:
        # Load the Celery app so that shared tasks sent from web processes use its broker.
        from gpuqueue import celery  # noqa: F401
