"""JSON bodies with a size limit: a job is a few kilobytes, so anything far larger is a
mistake or an attack, refused with 413 before it is parsed."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, status


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "The request body is too large."


class LimitedJSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = int(getattr(settings, "GPUQUEUE_API_MAX_BODY_BYTES", 64 * 1024))
        request = (parser_context or {}).get("request")
        length = 0
        if request is not None:
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
        if length > limit:
            raise RequestTooLarge(f"The request body is {length} bytes; at most {limit}.")
        if stream is None:
            return super().parse(stream, media_type, parser_context)
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise RequestTooLarge(f"The request body is over {limit} bytes.")
        import io

        return super().parse(io.BytesIO(body), media_type, parser_context)
