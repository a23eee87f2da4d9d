"""Requests no view should see, refused at the door with a clear 4xx (JSON under /api/).

- A NUL character in the path or the query string: PostgreSQL cannot store or compare one in
  text, so it would otherwise surface as a database error (a 500) deep in a lookup or filter.
- A body sent chunked, without Content-Length: the WSGI server hands Django no length, and
  Django reads such a body as empty, so a submission would be silently lost; 411 says why.
- A body over GPUQUEUE_API_MAX_BODY_BYTES under /api/: 413 before anything reads it.
- A Content-Type charset other than UTF-8 (or its subset ASCII): Django decodes the query
  string and form fields with it, and a codec such as unicode_escape turns `\ud800` into a lone
  surrogate that no database text can hold (a 500); 415 says which charsets are read.
"""

from __future__ import annotations

import codecs
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
READ_CHARSETS = frozenset({"utf-8", "ascii"})  # codecs' canonical names


def _charset_read(charset: str) -> bool:
    try:
        return codecs.lookup(charset).name in READ_CHARSETS
    except LookupError:
        return False


def refusal(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    """The answer of a request refused before any view: the API's error shape under /api/,
    plain text elsewhere."""
    if request.path.startswith("/api/"):
        # The API's error shape (gpuqueue/api/errors.py).
        return JsonResponse({"error": {"code": code, "message": message}}, status=status)
    return HttpResponse(message, status=status, content_type="text/plain")


class RequestGuardMiddleware:
    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        refused = self.check(request)
        return refused if refused is not None else self.get_response(request)

    def check(self, request: HttpRequest) -> HttpResponse | None:
        charset = request.content_params.get("charset")
        if charset is not None and not _charset_read(charset):
            return refusal(
                request, 415, "unsupported_charset", "Send text as UTF-8 (charset=utf-8)."
            )
        query = request.GET
        if "\x00" in request.path or any(
            "\x00" in key or any("\x00" in value for value in query.getlist(key)) for key in query
        ):
            return refusal(request, 400, "nul_character", "NUL characters are not allowed.")
        if request.method in BODY_METHODS:
            length = request.META.get("CONTENT_LENGTH") or ""
            chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
            if chunked and not length:
                return refusal(
                    request, 411, "length_required", "Send the body with a Content-Length."
                )
            limit = int(settings.GPUQUEUE_API_MAX_BODY_BYTES)
            if request.path.startswith("/api/") and length.isdigit() and int(length) > limit:
                return refusal(
                    request,
                    413,
                    "too_large",
                    f"The request body is {int(length)} bytes; at most {limit}.",
                )
        return None
