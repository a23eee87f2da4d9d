"""Scenario 7 (docs/architecture.md) under real concurrency: retries of one submission racing
from threads, each with its own database connection, create exactly one job."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from gpuqueue.models import Job, JobEvent

THREADS = 8


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_make_exactly_one_job(
    transactional_db: Any, api: Any, job_body: Any
) -> None:
    barrier = threading.Barrier(THREADS)
    results: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def retry() -> None:
        try:
            client = api("alice")
            barrier.wait(timeout=30)
            response = client.post(
                "/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="nightly-7"
            )
            results.append((response.status_code, response.json()["id"]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=retry) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] * (THREADS - 1) + [201]
    assert len({job_id for _, job_id in results}) == 1
    assert Job.objects.count() == 1 and JobEvent.objects.count() == 1
