"""OpenAPI generation: every operation documents the one error shape for its error statuses,
so that clients (and schemathesis) can rely on it."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema


class GpuqueueAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction: Any = "response") -> Any:
        from gpuqueue.api.serializers import ErrorSerializer

        responses = super()._get_response_bodies(direction)
        codes = ["401", "403", "404", "429"]
        if self.method in ("POST", "PUT", "PATCH"):
            codes += ["400", "409", "413", "415"]
        elif self.method == "GET":
            codes += ["400"]
        elif self.method == "DELETE":
            codes += ["409"]
        for code in codes:
            if code not in responses:
                responses[code] = self._get_response_for_code(
                    ErrorSerializer, code, direction=direction
                )
        return responses


class ApiTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[misc]
    """Documents `Authorization: Bearer gq_…` for gpuqueue.api.authentication."""

    target_class = "gpuqueue.api.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "gq_<prefix>_<secret>"}
