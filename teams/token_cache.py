"""API tokens kept per process, trusted only while the auth epoch in Redis is unchanged.

Reading the token and its user from PostgreSQL was a round trip and about a sixth of the web
process's work on every API request. A web process now keeps the row of each token it has
seen valid, with the epoch it read before loading it. The epoch is a random value in Redis,
replaced whenever a token or a user is saved or deleted (revocation, expiry, deactivation, a
change of role; see `teams.apps`). A request reads the epoch in the round trip that counts its
rate (`gpuqueue.api.throttling`) and uses the kept row only when the epoch is the one it was
loaded under, so a revocation still takes effect on the next request, in every process.

A missing epoch (Redis emptied) is replaced by a fresh random value, never by one seen before,
so emptying Redis cannot make a stale row look current. Rows are also dropped after
MAX_AGE_SECONDS: the bound for a change Redis lost (restored from an older snapshot) or one
written to the database behind gpuqueue's back.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from gpuqueue.core import redis as api_redis

log = logging.getLogger(__name__)

EPOCH_KEY = "gpuqueue:auth-epoch"
MAX_AGE_SECONDS = 60.0
# Distinct valid tokens seen by one process; past this the cache starts over.
MAX_ENTRIES = 10_000


@dataclass
class Entry:
    epoch: bytes  # the epoch read before `row` was loaded
    row: tuple[Any, ...]  # teams.services.token_row: the token's columns, then its user's
    loaded_at: float  # time.monotonic()
    last_used_at: datetime | None  # written by this process since it loaded the row


_entries: dict[str, Entry] = {}


def kept(digest: str) -> Entry | None:
    """The row kept for the token whose secret hashes to `digest`, not yet checked."""
    return _entries.get(digest)


def trusted(digest: str, entry: Entry, epoch: bytes | None) -> bool:
    """Whether `entry` may stand in for the database: `epoch` (read now) is the one it was
    loaded under, and it is not too old. A stale entry is dropped."""
    fresh = time.monotonic() - entry.loaded_at <= MAX_AGE_SECONDS
    if epoch is not None and entry.epoch == epoch and fresh:
        return True
    if _entries.get(digest) is entry:
        _entries.pop(digest, None)
    return False


def remember(digest: str, epoch: bytes, row: tuple[Any, ...]) -> Entry:
    """Keep a row that was valid when loaded; `epoch` must have been read before loading it."""
    if len(_entries) >= MAX_ENTRIES:
        _entries.clear()
    entry = _entries[digest] = Entry(epoch, row, time.monotonic(), None)
    return entry


def new_epoch() -> str:
    return secrets.token_hex(16)


def bump_epoch() -> None:
    """Make every process's kept tokens stale. Best effort: without Redis no process trusts
    its kept rows anyway (the epoch cannot be read), and MAX_AGE_SECONDS bounds the rest."""
    try:
        api_redis.client().set(EPOCH_KEY, new_epoch())
    except Exception:  # noqa: BLE001 - a change of identity must not fail because Redis is away
        log.warning("could not renew the auth epoch; kept tokens age out in %ss", MAX_AGE_SECONDS)


def identity_changed() -> None:
    """A token or user row changed: renew the epoch now and again once the change is committed.
    The first renewal stops the old row being used during the transaction; a process that
    reloads the row before the commit still reads the old values under the new epoch, which
    the second renewal makes stale."""
    bump_epoch()
    transaction.on_commit(bump_epoch)
