"""Follow the cluster: keep nodes and job states in sync with the backend, until stopped."""

from __future__ import annotations

import signal
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import OperationalError, close_old_connections

from gpuqueue.cluster import get_backend
from gpuqueue.cluster.base import ClusterError
from gpuqueue.services.cluster_sync import sync_cluster


class Command(BaseCommand):
    help = "Keep nodes and jobs in sync with the cluster backend (a long-running process)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--once", action="store_true", help="one pass, then exit")

    def handle(self, *args: Any, once: bool = False, **options: Any) -> None:
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        backend = get_backend()

        def sync() -> None:
            try:
                sync_cluster(backend)
            except (OperationalError, ClusterError) as exc:
                self.stderr.write(f"sync failed, retrying: {exc}")
                close_old_connections()

        watch = getattr(backend, "watch", None)
        if watch is not None and not once:
            # Backends with watch streams call the sync after every change themselves.
            watch(
                lambda: stopping,
                sync,
                sync_seconds=settings.GPUQUEUE_SYNC_SECONDS,
                resync_seconds=settings.GPUQUEUE_K8S_RESYNC_SECONDS,
                watch_seconds=settings.GPUQUEUE_K8S_WATCH_SECONDS,
                heartbeat=settings.GPUQUEUE_WATCHER_HEARTBEAT_FILE,
            )
            return
        while not stopping:
            sync()
            if once:
                return
            time.sleep(settings.GPUQUEUE_SYNC_SECONDS)
