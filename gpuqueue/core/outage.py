"""One log line a minute while Redis is away, not a traceback per request.

Redis holds counters, the cache epoch and the broker; every request and submission touches it,
and each place that does fails open (a request still gets through, a submission is still stored
and the periodic sweep admits it). A traceback from each of them during an outage would be
hundreds a minute, burying everything else, so they report here instead: the first
failure in a minute is logged as one line that names what failed, the error and how many
failures the previous line left out; the rest of the minute is only counted. Per process, all
places together: an outage is one event whichever call noticed it.

A failure that is not an outage (a bug, a bad argument) keeps its traceback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis
from kombu.exceptions import OperationalError

INTERVAL_SECONDS = 60.0
# What an unreachable or failing Redis raises: redis-py's errors, sockets, and kombu's wrapper
# around them when the broker is the one away.
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError, OperationalError)


class OutageLog:
    def __init__(
        self,
        what: str,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self._left_out = 0

    def failed(self, log: logging.Logger, doing: str, error: BaseException) -> None:
        """Report that `doing` (a phrase: "nudging the admission cycle") failed with `error`."""
        if not isinstance(error, OUTAGE_ERRORS):
            log.warning("%s failed", doing, exc_info=error)
            return
        with self._lock:
            now = self.clock()
            if self._last is not None and now - self._last < self.interval:
                self._left_out += 1
                return
            self._last, left_out, self._left_out = now, self._left_out, 0
        log.warning(
            "%s unavailable while %s (%s: %s); %d more failures left out of the log since the "
            "last line, which comes at most once every %gs",
            self.what,
            doing,
            type(error).__name__,
            error,
            left_out,
            self.interval,
        )


REDIS = OutageLog("Redis")


def redis_failed(log: logging.Logger, doing: str, error: BaseException) -> None:
    """The one call for a place that fails open when Redis is away."""
    REDIS.failed(log, doing, error)
