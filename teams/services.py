"""Writes on identities: API tokens (hashed, shown once)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from teams.models import ApiToken, AuditEntry

TOKEN_PREFIX = "gq_"


def hash_secret(secret: str) -> str:
    # Tokens carry 256 random bits, so a fast hash is enough (no password stretching needed).
    return hashlib.sha256(secret.encode()).hexdigest()


def create_token(
    user: Any, *, name: str, actor: Any, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Create a token; the returned secret is never stored and cannot be shown again."""
    prefix = secrets.token_hex(6)
    secret = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user, name=name, prefix=prefix, token_hash=hash_secret(secret),
            expires_at=expires_at,
        )
        AuditEntry.objects.create(
            actor=actor, action="token.create", object_type="token",
            object_repr=f"{user.get_username()}: {name} (gq_{prefix})",
            after={"user": user.get_username(), "name": name, "prefix": prefix},
        )
    return token, secret


def authenticate_token(secret: str) -> ApiToken | None:
    """The live token for `secret`, or None: looked up by prefix, compared in constant time."""
    if not secret.startswith(TOKEN_PREFIX):
        return None
    prefix, _, rest = secret[len(TOKEN_PREFIX):].partition("_")
    if not rest:
        return None
    token = ApiToken.objects.select_related("user").filter(prefix=prefix).first()
    if token is None or not hmac.compare_digest(token.token_hash, hash_secret(secret)):
        return None
    now = timezone.now()
    if token.revoked_at or (token.expires_at and token.expires_at <= now):
        return None
    if not token.user.is_active:
        return None
    # Write last-used at most once a minute, so a busy pipeline does not write on every call.
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token
