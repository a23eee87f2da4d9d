"""One Redis client per process for counters on hot paths (throttling, latency histograms,
the token cache's epoch).

Django's cache API has no atomic increment-with-expiry in one round trip; a request path that
runs hundreds of times a second wants exactly that, so these counters talk to Redis directly.
"""

from __future__ import annotations

import functools

import redis
from django.conf import settings


@functools.cache
def client() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=0.5,
        socket_connect_timeout=0.5,
        health_check_interval=30,
    )
