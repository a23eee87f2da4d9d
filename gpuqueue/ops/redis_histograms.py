"""Prometheus histograms shared by every process through a Redis hash.

Each process counts its observations in memory and adds them to the hash (HINCRBY per
bucket) in one pipelined round trip: at once for rare work (`flush=True`, the admission
cycle), and otherwise at most once a second from a background thread, so that a busy API
does not pay a Redis round trip per request. At most a second of observations is unpublished
at any moment; a process flushes what it holds when it exits and before it answers a scrape.

Buckets are stored as plain counts per bucket and made cumulative when read.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import Counter
from collections.abc import Sequence

from prometheus_client.core import HistogramMetricFamily

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
_SEP = "\x1f"
_INF = "+Inf"


class RedisHistogram:
    def __init__(
        self, name: str, doc: str, key: str, label_names: Sequence[str], buckets: Sequence[float]
    ) -> None:
        self.name, self.doc, self.key = name, doc, key
        self.label_names = list(label_names)
        self.buckets = tuple(buckets)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._sums: Counter[str] = Counter()
        self._flusher_pid: int | None = None  # the process whose flusher thread is running

    def observe(self, labels: Sequence[str], seconds: float, *, flush: bool = False) -> None:
        bucket = next((str(b) for b in self.buckets if seconds <= b), _INF)
        with self._lock:
            self._counts[_SEP.join([*labels, bucket])] += 1
            self._sums[_SEP.join([*labels, "sum"])] += seconds
        if flush:
            self.flush()
        else:
            self._ensure_flusher()

    def flush(self) -> None:
        """Publish what this process holds; on failure keep it for the next try."""
        from gpuqueue.core import redis as api_redis

        with self._lock:
            counts, sums = self._counts, self._sums
            self._counts, self._sums = Counter(), Counter()
        if not counts:
            return
        try:
            pipe = api_redis.client().pipeline(transaction=False)
            for field, n in counts.items():
                pipe.hincrby(self.key, field, n)
            for field, total in sums.items():
                pipe.hincrbyfloat(self.key, field, total)
            pipe.execute()
        except Exception:  # noqa: BLE001 - metrics never fail the work they measure
            log.debug("could not publish a histogram; keeping it for the next flush", exc_info=True)
            with self._lock:
                self._counts.update(counts)
                self._sums.update(sums)

    def collect(self) -> HistogramMetricFamily:
        """The histogram over every process (this one's unpublished part included)."""
        from gpuqueue.core import redis as api_redis

        self.flush()
        family = HistogramMetricFamily(self.name, self.doc, labels=self.label_names)
        try:
            raw = api_redis.client().hgetall(self.key)
        except Exception:  # noqa: BLE001
            log.warning("metrics histograms unavailable (Redis)", exc_info=True)
            return family
        series: dict[tuple[str, ...], dict[str, float]] = {}
        for field, value in raw.items():
            parts = field.decode().split(_SEP)
            labels, bucket = tuple(parts[:-1]), parts[-1]
            if len(labels) != len(self.label_names):
                continue
            series.setdefault(labels, {})[bucket] = float(value)
        for labels, values in sorted(series.items()):
            running, cumulative = 0.0, []
            for bound in (*map(str, self.buckets), _INF):
                running += values.get(bound, 0.0)
                cumulative.append((bound, running))
            family.add_metric(list(labels), cumulative, values.get("sum", 0.0))
        return family

    def _ensure_flusher(self) -> None:
        # Started lazily in the process that observes: the web server and Celery fork their workers,
        # and a thread does not survive a fork.
        if self._flusher_pid == os.getpid():
            return
        with self._lock:
            if self._flusher_pid == os.getpid():
                return
            self._flusher_pid = os.getpid()
        threading.Thread(target=self._flush_forever, name=f"flush-{self.key}", daemon=True).start()
        atexit.register(self.flush)

    def _flush_forever(self) -> None:
        stop = threading.Event()
        while not stop.wait(FLUSH_SECONDS):
            self.flush()
