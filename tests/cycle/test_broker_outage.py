"""A Redis outage never loses a submission: the nudge fails quietly, the periodic cycle admits."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpuqueue.celery import app
from gpuqueue.cycle import run_cycle
from gpuqueue.embedded import free_port
from gpuqueue.models import Job
from gpuqueue.services.cluster_sync import sync_cluster
from gpuqueue.states import JobState


@pytest.mark.django_db(transaction=True)
def test_a_submission_while_redis_is_down_is_kept_and_admitted_later(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)
    original = app.conf.broker_url
    app.conf.broker_url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    app.pool.force_close_all()
    try:
        started = time.monotonic()
        job = submit()
        elapsed = time.monotonic() - started
    finally:
        app.conf.broker_url = original
        app.pool.force_close_all()
    assert Job.objects.filter(pk=job.pk, state=JobState.PENDING).exists()
    assert elapsed < 10, "a broker outage must not hold a submission for long"
    # The periodic cycle (beat) admits it once things recover.
    assert run_cycle(backend=backend).admitted == [job.pk]
