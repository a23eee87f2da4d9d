"""Follow the cluster: keep nodes and job states in sync with the backend, until stopped.

With `--lease-namespace` (the chart and deploy/base pass the pod's namespace) two replicas run
and only the holder of the Lease acts (gpuqueue/cluster/lease.py): the other lists nothing and
waits, and every launch, stop, checkpoint signal and release goes through the lease's fence.
Without it (the embedded mode, `make run`) there is no election: the one process always acts.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError, close_old_connections

from gpuqueue.cluster import get_backend
from gpuqueue.cluster.base import Claimed, ClusterBackend, ClusterError
from gpuqueue.cluster.lease import Elector, FencedBackend
from gpuqueue.cycle.cluster_sync import sync_cluster


class Command(BaseCommand):
    help = "Keep nodes and jobs in sync with the cluster backend (a long-running process)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--once", action="store_true", help="one pass, then exit")
        parser.add_argument(
            "--lease-namespace",
            default="",
            help="act only while holding a Lease in this namespace (run two replicas)",
        )
        parser.add_argument("--lease-name", default="gpuqueue-watcher")

    def handle(
        self,
        *args: Any,
        once: bool = False,
        lease_namespace: str = "",
        lease_name: str = "gpuqueue-watcher",
        **options: Any,
    ) -> None:
        self.stopping = False

        def stop(signum: int, frame: Any) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            self.run(get_backend(), once, lease_namespace, lease_name)
        except Claimed as exc:  # another install's namespaces: a sentence, not a traceback
            raise CommandError(str(exc)) from exc

    def run(
        self, backend: ClusterBackend, once: bool, lease_namespace: str, lease_name: str
    ) -> None:
        if not lease_namespace:
            self.follow(backend, backend, once=once, should_stop=lambda: self.stopping)
            return
        api_client = getattr(backend, "api_client", None)
        if api_client is None or once:
            raise CommandError("--lease-namespace needs the kubernetes backend and no --once")
        elector = Elector(api_client, name=lease_name, namespace=lease_namespace)
        elector.start()
        try:
            self.lead(elector, backend)
        finally:
            elector.stop()

    def lead(self, elector: Elector, backend: ClusterBackend) -> None:
        """1. Wait for the Lease, touching the heartbeat (a follower is alive too).
        2. Follow the cluster while leading, with every action fenced by the lease.
        3. Leadership lost: drop the backend and go back to 1."""
        heartbeat = settings.GPUQUEUE_WATCHER_HEARTBEAT_FILE
        while not self.stopping:
            if not elector.wait_to_lead(lambda: self.stopping, lambda: _touch(heartbeat)):
                return
            self.stdout.write(f"leading as {elector.identity}")
            self.follow(
                backend,
                FencedBackend(backend, elector.leading),
                once=False,
                should_stop=lambda: self.stopping or not elector.leading(),
            )
            if not self.stopping:
                self.stderr.write(f"{elector.identity} lost the lease; following")
                get_backend.cache_clear()  # a fresh backend: its caches are the old term's
                backend = get_backend()

    def follow(
        self,
        backend: ClusterBackend,
        acting: ClusterBackend,
        *,
        once: bool,
        should_stop: Any,
    ) -> None:
        """Sync passes until `should_stop()`: `backend` is watched, `acting` is what the sync
        reads and changes the cluster through."""

        def sync() -> None:
            try:
                sync_cluster(acting)
            except (OperationalError, ClusterError) as exc:
                self.stderr.write(f"sync failed, retrying: {exc}")
                close_old_connections()

        watch = getattr(backend, "watch", None)
        if watch is not None and not once:
            # Backends with watch streams call the sync after every change themselves.
            watch(
                should_stop,
                sync,
                sync_seconds=settings.GPUQUEUE_SYNC_SECONDS,
                resync_seconds=settings.GPUQUEUE_K8S_RESYNC_SECONDS,
                watch_seconds=settings.GPUQUEUE_K8S_WATCH_SECONDS,
                heartbeat=settings.GPUQUEUE_WATCHER_HEARTBEAT_FILE,
            )
            return
        while not should_stop():
            sync()
            if once:
                return
            time.sleep(settings.GPUQUEUE_SYNC_SECONDS)


def _touch(path: str) -> None:
    if path:
        try:
            with open(path, "a"):
                pass
            os.utime(path)
        except OSError:
            pass  # the liveness probe says what a missing heartbeat means
