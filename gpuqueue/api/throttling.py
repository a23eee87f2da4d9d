"""Per-token rate limits, counted in Redis so that every web process shares one count.

A fixed window costs one round trip per request and keeps no history list, so a pipeline
allowed thousands of calls a minute costs no more than one allowed ten. The count is one
command, a script that increments the window's counter and gives it its expiry when it is new
(atomically, so no counter is left without one): through redis-py a pipeline of INCR and
EXPIRE cost about 40 us more CPU per request than one command. If Redis is unreachable the
request is let through: a lost counter is better than an API that refuses every pipeline.

The same command reads the cache epoch (`gpuqueue.core.caches`): a request whose token is kept
by its process counts its rate and checks that token in one round trip, during
authentication, and the throttle then takes that count instead of asking again.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from rest_framework.throttling import BaseThrottle

from gpuqueue.core import caches
from gpuqueue.core import redis as api_redis
from gpuqueue.core.client_address import client_address
from gpuqueue.core.outage import redis_failed

log = logging.getLogger(__name__)
# KEYS[1]: the cache epoch; KEYS[2…]: window counters to count. ARGV[1]: a fresh epoch, set
# when there is none; ARGV[2]: the counters' lifetime in seconds. Returns {epoch, new counts…}.
COUNT_SCRIPT = """
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  epoch = ARGV[1]
  redis.call('SET', KEYS[1], epoch)
end
local out = {epoch}
for i = 2, #KEYS do
  local count = redis.call('INCR', KEYS[i])
  if count == 1 then redis.call('EXPIRE', KEYS[i], ARGV[2]) end
  out[i] = count
end
return out
"""
_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """ "600/min" -> (600, 60)."""
    count, _, period = rate.partition("/")
    return int(count), _PERIODS[period.strip().lower()]


@dataclass(frozen=True)
class Counter:
    key: str  # the current window's counter in Redis
    limit: int
    period: int  # seconds
    window: int  # its number: start time // period

    def retry_after(self, now: float) -> float:
        """Seconds until the next window."""
        return (self.window + 1) * self.period - now


def counter(ident: str, rate: str, now: float) -> Counter | None:
    """The counter for `ident` at `now`, or None when `rate` is empty (no limit)."""
    if not rate:
        return None
    limit, period = parse_rate(rate)
    window = int(now // period)
    return Counter(f"gpuqueue:throttle:{ident}:{period}:{window}", limit, period, window)


def token_counter(prefix: str, now: float) -> Counter | None:
    return counter(f"token:{prefix}", settings.GPUQUEUE_API_RATE, now)


# --- Failed tokens ----------------------------------------------------------------------------
# Failures are counted per client address (as the trusted proxies report it,
# gpuqueue.core.client_address) and per token prefix (the token an impostor guesses at). Past
# GPUQUEUE_API_BAD_TOKEN_RATE of either, a failing request is answered 429 with Retry-After
# instead of 401. Only failures are ever refused: every token is checked before its request is
# counted, so a valid token works whoever failed before it, from whatever address (a shared
# NAT, a CI runner, an attacker guessing at its prefix). A failure costs the one indexed lookup
# by prefix that a success costs.


@dataclass(frozen=True)
class BadTokenCounters:
    address: Counter
    prefix: Counter


def bad_token_counters(address: str, prefix: str, now: float) -> BadTokenCounters | None:
    rate = settings.GPUQUEUE_API_BAD_TOKEN_RATE
    by_address = counter(f"badtoken:addr:{address}", rate, now)
    by_prefix = counter(f"badtoken:token:{prefix}", rate, now)
    if by_address is None or by_prefix is None:
        return None
    return BadTokenCounters(by_address, by_prefix)


def count_bad_token(counters: BadTokenCounters | None, now: float) -> float | None:
    """Count one failure; seconds to wait when its address or its prefix has now failed more
    often than the rate allows, else None. Fails open when Redis is away."""
    if counters is None:
        return None
    try:
        _, counts = _run_count_script([counters.address, counters.prefix])
    except Exception as error:  # noqa: BLE001 - fail open
        redis_failed(log, "counting a failed token (not throttled)", error)
        return None
    over = [
        c.retry_after(now)
        for c, count in zip((counters.address, counters.prefix), counts, strict=True)
        if count > c.limit
    ]
    return max(over) if over else None


def count_and_epoch(counted: Counter | None) -> tuple[bytes, int]:
    """One round trip: the cache epoch and, with `counted`, the request counted in its window.
    Raises what redis-py raises when Redis is unreachable."""
    epoch, counts = _run_count_script([counted] if counted else [])
    return epoch, counts[0] if counts else 0


def _run_count_script(counters: list[Counter]) -> tuple[bytes, list[int]]:
    """The epoch and each counter counted once, in one atomic round trip (the counters share
    their period)."""
    reply = _count_script()(
        keys=[caches.EPOCH_KEY, *(c.key for c in counters)],
        args=[caches.new_epoch(), counters[0].period + 1 if counters else 0],
        client=api_redis.client(),
    )
    return reply[0], [int(count) for count in reply[1:]]


class TokenRateThrottle(BaseThrottle):
    """Keyed by API token (its prefix), else by signed-in user, else by client address (as
    the trusted proxies report it: DRF's own reading takes X-Forwarded-For as the client
    sends it)."""

    # Set on the request by authentication when it already counted it: (counter key, count).
    COUNTED_ATTR = "_gpuqueue_counted"

    def __init__(self) -> None:
        self.retry_after: float | None = None

    def get_ident(self, request: Any) -> str:
        return client_address(request)

    def identity(self, request: Any) -> tuple[str, str]:
        token = getattr(request, "auth", None)
        prefix = getattr(token, "prefix", None)
        if prefix:
            return f"token:{prefix}", settings.GPUQUEUE_API_RATE
        if request.user and request.user.is_authenticated:
            return f"user:{request.user.pk}", settings.GPUQUEUE_API_RATE
        return f"addr:{self.get_ident(request)}", settings.GPUQUEUE_API_ANON_RATE

    def allow_request(self, request: Any, view: Any) -> bool:
        now = time.time()
        counted = counter(*self.identity(request), now)
        if counted is None:
            return True
        earlier = getattr(request, self.COUNTED_ATTR, None)
        if earlier is not None and earlier[0] == counted.key:
            count = earlier[1]
        else:
            try:
                epoch, count = count_and_epoch(counted)
                caches.note_epoch(epoch)
            except Exception as error:  # noqa: BLE001 - fail open, see the module docstring
                redis_failed(log, "counting a request for the throttle (let through)", error)
                return True
        if count > counted.limit:
            self.retry_after = counted.retry_after(now)
            return False
        return True

    def wait(self) -> float | None:
        return self.retry_after


@functools.cache
def _count_script() -> Any:
    # Called with the client of the moment; redis-py sends EVALSHA and loads the script
    # itself when the server does not know it (a restarted Redis).
    return api_redis.client().register_script(COUNT_SCRIPT)
