"""Launching a list of jobs: one outcome per job, in order, and one job's failure its own —
with the thread pool of a backend that calls out (Kubernetes), and with the simulated
backend's single INSERT."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from django.db import DataError

from gpuqueue.cluster.base import ClusterBackend, ClusterError
from gpuqueue.models import SimulatedWorkload
from tests.cluster.test_manifests import SPEC


class Calling(ClusterBackend):
    """A backend whose launch takes a while and refuses job 3, counting launches at once."""

    name = "calling"
    launch_concurrency = 4

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = self.most = 0

    def launch(self, spec: Any) -> str | None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.05)
        with self.lock:
            self.running -= 1
        if spec.job_id == 3:
            raise ClusterError("refused", transient=False)
        return f"token-{spec.job_id}"

    list_nodes = request_checkpoint = stop = observe = read_log = None  # type: ignore[assignment]


Calling.__abstractmethods__ = frozenset()


def test_launches_run_at_once_up_to_the_backends_concurrency_and_answer_in_order() -> None:
    backend = Calling()
    outcomes = backend.launch_all([replace(SPEC, job_id=i) for i in range(1, 9)])
    assert [o if isinstance(o, str) else "refused" for o in outcomes] == [
        "token-1", "token-2", "refused", "token-4", "token-5", "token-6", "token-7", "token-8"
    ]  # fmt: skip
    assert isinstance(outcomes[2], ClusterError)
    assert 1 < backend.most <= 4


@pytest.mark.django_db
def test_a_job_the_database_refuses_fails_alone_and_the_others_launch(backend: Any) -> None:
    good = replace(SPEC, job_id=101, attempt=1)
    bad = replace(SPEC, job_id=102, attempt=1, env={"X": "nul\x00"})  # jsonb has no NUL
    also_good = replace(SPEC, job_id=103, attempt=1)
    outcomes = backend.launch_all([good, bad, also_good])
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], DataError)
    assert set(SimulatedWorkload.objects.values_list("job_id", flat=True)) == {101, 103}
