"""One error body for every API failure:
{"error": {"code": ..., "message": ..., "fields": {field: [messages]}}}.
Domain errors map to HTTP codes here and nowhere else."""

from __future__ import annotations

from typing import Any

from django.db.models import ProtectedError
from django.http import Http404
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from gpuqueue.core.errors import Refused, Unavailable
from gpuqueue.core.states import InvalidTransition
from gpuqueue.services.jobs.cancel import CancelRefused
from gpuqueue.services.jobs.submit import SubmissionRefused

# DRF's codes for the statuses that carry no domain meaning, spelled the same everywhere.
_CODES = {
    status.HTTP_401_UNAUTHORIZED: "not_authenticated",
    status.HTTP_403_FORBIDDEN: "forbidden",
    status.HTTP_404_NOT_FOUND: "not_found",
    status.HTTP_405_METHOD_NOT_ALLOWED: "method_not_allowed",
    status.HTTP_406_NOT_ACCEPTABLE: "not_acceptable",
    status.HTTP_415_UNSUPPORTED_MEDIA_TYPE: "unsupported_media_type",
    status.HTTP_429_TOO_MANY_REQUESTS: "throttled",
}


def error_response(
    code: str,
    message: str,
    http_status: int,
    fields: Any = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body: dict[str, Any] = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    return Response({"error": body}, status=http_status, headers=headers)


def _flatten(detail: Any) -> dict[str, list[str]]:
    """DRF nests errors (lists of dicts for list items); the error shape wants one list of
    strings per field, with nested paths joined by dots."""
    out: dict[str, list[str]] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif isinstance(value, list):
            if all(not isinstance(item, (dict, list)) for item in value):
                out.setdefault(prefix or "non_field_errors", []).extend(str(i) for i in value)
            else:
                for index, item in enumerate(value):
                    if item:
                        walk(f"{prefix}.{index}" if prefix else str(index), item)
        else:
            out.setdefault(prefix or "non_field_errors", []).append(str(value))

    walk("", detail)
    return out


def _not_found_message(context: dict[str, Any]) -> str:
    """ "No job 12 (or you may not see it)." for a detail route, rather than Django's "No Job
    matches the given query.": what a user may not see answers 404 too, so say both."""
    view = context.get("view")
    kwargs = context.get("kwargs") or {}
    key = getattr(view, "lookup_url_kwarg", None) or getattr(view, "lookup_field", "pk")
    queryset = getattr(view, "queryset", None)
    if key in kwargs and queryset is not None:
        return f"No {queryset.model._meta.verbose_name} {kwargs[key]} (or you may not see it)."
    return "Not found (or you may not see it)."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, InvalidTransition):
        return error_response("invalid_transition", exc.message, status.HTTP_409_CONFLICT)
    if isinstance(exc, Http404):
        return error_response("not_found", _not_found_message(context), status.HTTP_404_NOT_FOUND)
    if isinstance(exc, CancelRefused):
        return error_response("forbidden", str(exc), status.HTTP_403_FORBIDDEN)
    if isinstance(exc, SubmissionRefused):
        fields = {exc.field: [str(exc)]} if exc.field else None
        return error_response("refused", str(exc), exc.status, fields)
    if isinstance(exc, Unavailable):
        return error_response(
            exc.code, exc.message, exc.status, headers={"Retry-After": str(exc.retry_after)}
        )
    if isinstance(exc, Refused):
        return error_response(exc.code, exc.message, exc.status, exc.fields or None)
    if isinstance(exc, ProtectedError):
        return error_response(
            "in_use",
            "Other objects still refer to this one; remove them first.",
            status.HTTP_409_CONFLICT,
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    # Keep WWW-Authenticate (401) and Retry-After (429).
    headers = {
        key: value
        for key, value in response.headers.items()
        if key.lower() in ("www-authenticate", "retry-after", "allow")
    }
    if isinstance(exc, exceptions.ValidationError):
        return error_response(
            "invalid",
            "The request is invalid; see fields.",
            response.status_code,
            _flatten(exc.detail),
            headers,
        )
    detail = getattr(exc, "detail", str(exc))
    code = _CODES.get(response.status_code) or str(getattr(exc, "default_code", "error"))
    return error_response(code, str(detail), response.status_code, headers=headers)


@csrf_exempt  # it changes nothing; without this, a POST here would get CSRF's HTML 403
def api_not_found(request: Any, *args: Any, **kwargs: Any) -> Any:
    """Any /api/v1/ path no route matches: the error shape, not Django's HTML page."""
    from django.http import JsonResponse

    return JsonResponse(
        {"error": {"code": "not_found", "message": "No such API endpoint or object."}},
        status=status.HTTP_404_NOT_FOUND,
    )
