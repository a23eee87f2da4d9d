from __future__ import annotations

import logging
import time
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions

from gpuqueue.api import throttling
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


def live_token(secret: str, request: Any) -> ApiToken | None:
    """The live token for `secret` (its prefix finds the row, its hash must match, and it must
    be neither revoked nor expired, for an active user), from the row this process keeps
    while the auth epoch is unchanged (`teams.token_cache`), else from the database.

    A kept token's request is counted for its rate in the same Redis round trip that reads
    the epoch (its secret matched a valid token's hash, so an impostor cannot spend a real
    token's rate), and the count is left on the request for the throttle. Otherwise the epoch
    is read first, then the row, so that a change between the two makes the kept row stale."""
    prefix = services.token_prefix(secret)
    if prefix is None:
        return None
    digest = services.hash_secret(secret)
    entry = token_cache.kept(digest)
    counted = throttling.token_counter(prefix, time.time()) if entry is not None else None
    try:
        epoch, count = throttling.count_and_epoch(counted)
    except Exception:  # noqa: BLE001 - without the epoch, ask the database
        log.warning("auth epoch unavailable; reading the token from the database", exc_info=True)
        epoch = None
    else:
        if counted is not None:
            setattr(request, throttling.TokenRateThrottle.COUNTED_ATTR, (counted.key, count))
    now = timezone.now()
    if entry is not None and token_cache.trusted(digest, entry, epoch):
        row = entry.row
    else:
        entry = None
        row = services.token_row(prefix)
        if row is None:
            return None
    token = services.token_from_row(row)
    if entry is not None and entry.last_used_at is not None:
        token.last_used_at = entry.last_used_at
    if not services.usable(token, digest, now):  # a kept token may have expired since
        return None
    if entry is None and epoch is not None:
        entry = token_cache.remember(digest, epoch, row)
    if services.record_use(token, now) and entry is not None:
        entry.last_used_at = now
    return token
