"""Celery beat, run by the replica that holds the beat Lease (two replicas, one beat).

    python manage.py run_beat --lease-namespace NS -- --loglevel INFO --schedule /tmp/s

1. Campaign for the Lease (gpuqueue/cluster/lease.py) until this replica leads.
2. Start `celery -A gpuqueue.celery beat` with the arguments after `--` as a child process.
3. While it runs, check the lease's fence twice a second: lost, or this process is told to stop,
   and the child gets SIGTERM (then SIGKILL after 10 s). A lost lease goes back to 1; a stop
   releases the Lease, so the other replica starts its beat at its next try.
4. A beat that exits by itself ends this process with its status (the kubelet restarts it).

Two beats for a short while (a partition longer than the fence's margin) send each periodic
task twice at worst: every periodic task is a sweep that is safe to run twice (the cycle and the
sync take their advisory locks), and each carries `expires`. Without `--lease-namespace` (the
embedded mode) beat is exec'd directly: no election.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from gpuqueue.cluster.lease import Elector, api_client_for

STOP_GRACE_SECONDS = 10


class Command(BaseCommand):
    help = "Run Celery beat in the replica that holds the beat Lease."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--lease-namespace", default="", help="elect through a Lease here")
        parser.add_argument("--lease-name", default="gpuqueue-beat")
        parser.add_argument("beat_args", nargs="*", help="arguments for celery beat, after --")

    def handle(
        self,
        *args: Any,
        lease_namespace: str = "",
        lease_name: str = "gpuqueue-beat",
        beat_args: list[str] | None = None,
        **options: Any,
    ) -> None:
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "gpuqueue.celery",
            "beat",
            *(beat_args or []),
        ]
        if not lease_namespace:
            os.execv(sys.executable, command)
        api_client = api_client_for(settings.GPUQUEUE_K8S_KUBECONFIG, settings.GPUQUEUE_K8S_CONTEXT)
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        elector = Elector(api_client, name=lease_name, namespace=lease_namespace)
        elector.start()
        status = 0
        try:
            while not stopping:
                # 1.
                if not elector.wait_to_lead(lambda: stopping, lambda: None):
                    break
                self.stdout.write(f"leading as {elector.identity}: starting beat")
                # 2.
                child = subprocess.Popen(command)
                # 3.
                while child.poll() is None and not stopping and elector.leading():
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.wait(timeout=0.5)
                if child.poll() is not None and not stopping:
                    status = child.returncode  # 4.
                    break
                self.stderr.write("stopping beat: " + ("asked to" if stopping else "lease lost"))
                _end(child)
        finally:
            elector.stop()
        if status:
            raise SystemExit(status)


def _end(child: subprocess.Popen[bytes]) -> None:
    child.terminate()
    try:
        child.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
