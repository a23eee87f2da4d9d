"""One error body for every API failure:
{"error": {"code": ..., "message": ..., "fields": {field: [messages]}}}.
Domain errors map to HTTP codes here and nowhere else."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from gpuqueue.services.cancel import CancelRefused
from gpuqueue.services.submit import SubmissionRefused
from gpuqueue.states import InvalidTransition


def error_response(code: str, message: str, http_status: int, fields: Any = None) -> Response:
    body: dict[str, Any] = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    return Response({"error": body}, status=http_status)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, InvalidTransition):
        return error_response(
            "invalid_transition", f"The job is {exc.from_state} and cannot become {exc.to_state}.",
            status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, CancelRefused):
        return error_response("forbidden", str(exc), status.HTTP_403_FORBIDDEN)
    if isinstance(exc, SubmissionRefused):
        fields = {exc.field: [str(exc)]} if exc.field else None
        return error_response("refused", str(exc), exc.status, fields)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail
        fields = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        return error_response("invalid", "The request is invalid; see fields.", response.status_code, fields)
    detail = getattr(exc, "detail", str(exc))
    code = getattr(exc, "default_code", "error")
    return error_response(str(code), str(detail), response.status_code)
