"""During a Redis outage submissions are stored and say so once a minute in the log, not with a
traceback each: the nudge that asks for a cycle is lost, and the periodic sweep admits them."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from gpuqueue.core import outage
from gpuqueue.core import redis as api_redis
from gpuqueue.models import Job
from gpuqueue.ops.embedded import free_port


@pytest.fixture
def redis_down(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A port nothing listens on: connections are refused, as when Redis is stopped.
    monkeypatch.setattr(outage, "REDIS", outage.OutageLog("Redis"))  # as in a fresh process
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    api_redis.client.cache_clear()
    yield
    api_redis.client.cache_clear()


def test_submissions_during_an_outage_are_stored_and_logged_once_without_a_traceback(
    api: Any,
    job_body: Any,
    redis_down: None,  # after the world is built: Redis goes away under a running service
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    alice = api("alice")
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            with django_capture_on_commit_callbacks(execute=True):
                response = alice.post("/api/v1/jobs/", job_body, format="json")
            assert response.status_code == 201

    assert Job.objects.count() == 5
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings if r.exc_info] == []
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].getMessage().startswith("Redis unavailable while ")


def test_an_outage_is_one_line_a_minute_with_the_count_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1000.0]
    outage_log = outage.OutageLog("Redis", clock=lambda: now[0])
    log = logging.getLogger("gpuqueue.tests.outage")
    refused = ConnectionRefusedError(111, "Connection refused")
    with caplog.at_level(logging.WARNING, logger=log.name):
        for _ in range(30):  # a busy minute
            outage_log.failed(log, "nudging the admission cycle", refused)
            now[0] += 1.9
        outage_log.failed(log, "nudging the admission cycle", refused)  # 57 s on: counted
        now[0] += 3.1
        outage_log.failed(log, "nudging the admission cycle", refused)  # a minute on: a line

    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and not any(r.exc_info for r in caplog.records)
    assert "0 more failures left out" in lines[0]
    assert "30 more failures left out" in lines[1]


def test_a_failure_that_is_not_an_outage_keeps_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage_log = outage.OutageLog("Redis")
    log = logging.getLogger("gpuqueue.tests.outage")
    with caplog.at_level(logging.WARNING, logger=log.name):
        for _ in range(2):
            outage_log.failed(log, "nudging the admission cycle", TypeError("a bug"))
    assert [r.exc_info is not None for r in caplog.records] == [True, True]


@pytest.mark.django_db
def test_failed_tokens_during_an_outage_are_logged_once_without_a_traceback(
    redis_down: None, caplog: pytest.LogCaptureFixture
) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer gq_{secrets.token_hex(4)}_wrong")
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            assert client.get("/api/v1/me/").status_code == 401

    ours = [r for r in caplog.records if r.name.startswith("gpuqueue")]
    warnings = [r for r in ours if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings if r.exc_info] == []
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
