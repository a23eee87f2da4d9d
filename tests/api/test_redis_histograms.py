"""Histograms shared by every web and worker process through Redis."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gpuqueue.ops.redis_histograms import RedisHistogram


def histogram(key: str) -> RedisHistogram:
    return RedisHistogram("h", "doc", key, ["route"], (0.01, 0.1, 1.0))


def samples(h: RedisHistogram) -> dict[tuple[str, str], float]:
    return {(s.name, s.labels.get("le", "")): s.value for s in h.collect().samples}


@pytest.fixture
def key() -> str:
    return f"gpuqueue:test:hist:{uuid.uuid4().hex}"


def test_observations_of_two_processes_add_up_cumulatively(key: str, db: Any) -> None:
    web1, web2 = histogram(key), histogram(key)  # two processes: one Redis hash
    web1.observe(["jobs"], 0.005)
    web1.observe(["jobs"], 0.05)
    web2.observe(["jobs"], 0.5)
    web2.observe(["jobs"], 5.0)
    web1.flush()
    web2.flush()
    got = samples(histogram(key))
    assert got[("h_bucket", "0.01")] == 1
    assert got[("h_bucket", "0.1")] == 2
    assert got[("h_bucket", "1.0")] == 3
    assert got[("h_bucket", "+Inf")] == 4
    assert got[("h_count", "")] == 4
    assert got[("h_sum", "")] == pytest.approx(5.555)


def test_a_scrape_includes_what_this_process_has_not_published_yet(key: str, db: Any) -> None:
    h = histogram(key)
    h.observe(["jobs"], 0.2)  # no flush: the background flusher has not run
    assert samples(h)[("h_count", "")] == 1


def test_observations_are_kept_while_redis_is_down(
    key: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuqueue.core import redis as api_redis

    h = histogram(key)
    h.observe(["jobs"], 0.2)

    def unreachable() -> Any:
        raise ConnectionError("redis is down")

    with monkeypatch.context() as m:
        m.setattr(api_redis, "client", unreachable)
        h.flush()  # fails, keeps the observation
    h.observe(["jobs"], 0.3)
    h.flush()
    assert samples(histogram(key))[("h_count", "")] == 2
