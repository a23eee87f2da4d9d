"""An Idempotency-Key stands for one request body: a retry (the same body) gets the first
job or array back, while the key reused with another body is refused, since answering with the
first job would let a pipeline believe its new job was made."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rest_framework import status
from rest_framework.request import Request

from gpuqueue.core.errors import Refused


def body_digest(request: Request) -> str:
    """SHA-256 of the body as parsed, keys sorted (the same JSON however it was spaced or
    ordered gives the same digest), without the team: a retry may leave out the one team
    the job went to (`same_team`)."""
    data = request.data
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k != "team"}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def same_team(request: Request, earlier: Any) -> bool:
    named = request.data.get("team") if isinstance(request.data, dict) else None
    return named is None or named == earlier.team.slug


def check_same_body(request: Request, earlier: Any, key: str | None, digest: str) -> None:
    """Refuse (422) when `earlier`, made with `key`, was made from another body. Rows made
    before digests were kept have none and are taken as the same."""
    kept = getattr(earlier, "idempotency_body", None)
    if key and kept and (kept != digest or not same_team(request, earlier)):
        what = "array" if hasattr(earlier, "size") else "job"
        raise Refused(
            f"Idempotency-Key {key!r} was already used for {what} {earlier.pk} with a different "
            f"request body. Send the same body to get {what} {earlier.pk} back, or use a new key "
            f"for a new {what}.",
            status=status.HTTP_422_UNPROCESSABLE_ENTITY,
            code="idempotency_key_reused",
        )
