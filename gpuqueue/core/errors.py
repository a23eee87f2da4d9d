"""The one domain refusal that every service raises and the API maps to its error shape.

It lives apart from any model so that teams.services and gpuqueue.services can both raise it
without importing each other.
"""

from __future__ import annotations


class Refused(Exception):
    """A write the caller may not make, or whose input the domain rules refuse.

    `fields` maps an input name to its messages (field-level errors); `status` is the HTTP
    status an entry point should answer with (400 invalid input, 403 role, 409 conflict).
    """

    status = 400
    code = "refused"

    def __init__(
        self,
        message: str,
        *,
        fields: dict[str, list[str]] | None = None,
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields or {}
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code


class Forbidden(Refused):
    status = 403
    code = "forbidden"


class Conflict(Refused):
    status = 409
    code = "conflict"


class Unavailable(Exception):
    """What the caller asked for depends on something that cannot be reached now (the
    cluster); asking again after `retry_after` seconds may succeed. Never the caller's fault."""

    status = 503
    code = "unavailable"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
