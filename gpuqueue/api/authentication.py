from __future__ import annotations

import logging
import time
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions

from gpuqueue.api import throttling
from gpuqueue.core import caches
from gpuqueue.core.client_address import client_address
from gpuqueue.core.outage import redis_failed
from teams import services, token_cache
from teams.models import ApiToken

log = logging.getLogger(__name__)


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gq_…` (or `Token gq_…`)."""

    keywords = ("bearer", "token")

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        token = live_token(header[1], request)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="gpuqueue"'


def _throttled(wait: float | None) -> None:
    if wait is not None:
        raise exceptions.Throttled(wait, "Too many requests with invalid tokens; retry later.")


def live_token(secret: str, request: Any) -> ApiToken | None:
    """The live token for `secret` (its prefix finds the row, its hash must match, and it must
    be neither revoked nor expired, for an active user), kept by this process while the cache
    epoch is unchanged (`teams.token_cache`), else read from the database.

    The epoch is read in the round trip that counts the request's rate, and noted for the
    rest of the request (`gpuqueue.core.caches`). The rate is counted there only for a kept
    token, whose secret matched a valid token's hash, so an impostor cannot spend a real
    token's rate; the count is left on the request for the throttle. Otherwise the epoch is
    read first, then the row, so that a change between the two makes the kept row stale."""
    prefix = services.token_prefix(secret)
    if prefix is None:
        return None
    digest = services.hash_secret(secret)
    holds = token_cache.holds(digest)
    counted = throttling.token_counter(prefix, time.time()) if holds else None
    try:
        epoch, count = throttling.count_and_epoch(counted)
    except Exception as error:  # noqa: BLE001 - without the epoch, ask the database
        redis_failed(log, "reading the cache epoch (the token is read from the database)", error)
        epoch = None
    else:
        if counted is not None:
            setattr(request, throttling.TokenRateThrottle.COUNTED_ATTR, (counted.key, count))
    caches.note_epoch(epoch)
    now = timezone.now()
    token = token_cache.kept(digest, epoch) if holds else None
    if token is None:
        token = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
        if token is None or not services.usable(token, digest, now):
            # Counted only once it failed: a valid token is never refused for others' failures.
            failures = throttling.bad_token_counters(client_address(request), prefix, time.time())
            _throttled(throttling.count_bad_token(failures, time.time()))
            return None
        token_cache.keep(digest, epoch, token)
    elif not services.usable(token, digest, now):  # a kept token may have expired since
        return None
    if services.record_use(token, now):
        token_cache.used(digest, epoch, now)
    return token
