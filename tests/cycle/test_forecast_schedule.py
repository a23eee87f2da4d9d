"""Forecasts are written only where they moved, and run less often when they are slow."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import FORECAST_TIMING_KEY, forecast_due, refresh_forecasts, run_cycle
from gpuqueue.tasks import refresh_forecasts_task


def test_a_forecast_waits_nine_times_as_long_as_the_last_one_took() -> None:
    assert forecast_due(1000.0, None, 0.0)
    assert not forecast_due(1000.0 + 89.0, 1000.0, 10.0)  # took 10 s: next after 90 s
    assert forecast_due(1000.0 + 90.0, 1000.0, 10.0)
    assert forecast_due(1000.0 + 0.9, 1000.0, 0.1)  # a quick one may run every beat


def test_an_unchanged_forecast_writes_nothing(world: Any, submit: Any, backend: Any) -> None:
    sync_cluster(backend)
    now = timezone.now()
    for _ in range(4):
        submit(gpus_per_worker=8, max_runtime_seconds=3600)
    run_cycle(backend=backend, now=now)
    waiting = [submit(gpus_per_worker=8) for _ in range(3)]
    run_cycle(backend=backend, now=now)
    assert refresh_forecasts(now=now) == 3
    with CaptureQueriesContext(connection) as queries:
        assert refresh_forecasts(now=now) == 3
    assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    for job in waiting:
        job.refresh_from_db()
        assert job.estimated_start is not None


@pytest.fixture
def no_forecast_timing() -> Iterator[None]:
    cache.delete(FORECAST_TIMING_KEY)
    yield
    cache.delete(FORECAST_TIMING_KEY)


def test_the_task_skips_while_a_slow_forecast_has_used_its_share(
    world: Any, submit: Any, backend: Any, no_forecast_timing: None
) -> None:
    sync_cluster(backend)
    submit()
    cache.set(FORECAST_TIMING_KEY, (time.time(), 30.0))  # the last one took 30 s, just now
    assert refresh_forecasts_task() is None
    cache.set(FORECAST_TIMING_KEY, (time.time() - 600, 30.0))  # ... ten minutes ago
    assert refresh_forecasts_task() is not None
    finished, seconds = cache.get(FORECAST_TIMING_KEY)
    assert time.time() - finished < 60 and 0 <= seconds < 30
