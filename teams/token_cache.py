"""API tokens kept by each web process with their users, under `gpuqueue.core.caches`' rule.

Reading the token and its user from PostgreSQL on every request cost a fifth more CPU per
submission (benchmarks/api_load.py). The epoch comes from the round trip that counts the
request's rate (`gpuqueue.api.authentication`), so a revocation, an expiry, a deactivated user
or a demoted site admin takes effect at the next request in every process. Only tokens found
valid are kept: an impostor's guess at a secret keeps nothing.

Each request gets copies of the kept token and user (`copy.copy` of a model instance, which
Django implements through its pickling hooks); tests/api/test_token_cache.py fails when the
pinned Django moves, so that this is checked again.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime

from gpuqueue.core import caches
from teams.models import ApiToken


@dataclass
class Held:
    token: ApiToken  # with its user; never handed out, only copies
    last_used_at: datetime | None  # as this process last wrote or read it


_kept: caches.Kept[str, Held] = caches.Kept()


def holds(digest: str) -> bool:
    """A token is kept for the secret that hashes to `digest` (current or not)."""
    return _kept.holds(digest)


def kept(digest: str, epoch: bytes | None) -> ApiToken | None:
    """A copy of the token kept for `digest`, if it was read under `epoch`."""
    held = _kept.get(digest, epoch)
    if held is None:
        return None
    token = copy.copy(held.token)
    token.user = copy.copy(held.token.user)
    token.last_used_at = held.last_used_at
    return token


def keep(digest: str, epoch: bytes | None, token: ApiToken) -> None:
    """Keep a token found valid; `epoch` must have been read before the token."""
    kept_token = copy.copy(token)
    kept_token.user = copy.copy(token.user)
    _kept.put(digest, epoch, Held(kept_token, token.last_used_at))


def used(digest: str, epoch: bytes | None, when: datetime) -> None:
    """The kept token's last use was written as `when`."""
    held = _kept.get(digest, epoch)
    if held is not None:
        held.last_used_at = when
