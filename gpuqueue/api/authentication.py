from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions

from teams.services import authenticate_token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gq_…` (or `Token gq_…`)."""

    keywords = ("bearer", "token")

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        token = authenticate_token(header[1])
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="gpuqueue"'
