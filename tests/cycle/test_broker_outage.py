"""A Redis outage never loses a submission: the nudge fails quietly, the periodic cycle admits."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpuqueue.celery import app
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from gpuqueue.ops.embedded import free_port


def use_broker(url: str) -> None:
    """Point the Celery app at `url`, dropping pooled connections to the old broker."""
    app.conf.broker_url = url
    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    app.amqp._producer_pool = None


@pytest.mark.django_db(transaction=True)
def test_a_submission_while_redis_is_down_is_kept_and_admitted_later(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)
    original = app.conf.broker_url
    use_broker(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        started = time.monotonic()
        job = submit()
        elapsed = time.monotonic() - started
    finally:
        use_broker(original)
    assert Job.objects.filter(pk=job.pk, state=JobState.PENDING).exists()
    assert elapsed < 10, "a broker outage must not hold a submission for long"
    # The periodic cycle (beat) admits it once things recover.
    assert run_cycle(backend=backend).admitted == [job.pk]
