"""JSON bodies with limits: a job is a few kilobytes of plain values, so anything far larger,
nested deeper than MAX_DEPTH, or carrying NUL characters (PostgreSQL cannot store them in text)
or lone surrogates (no UTF-8 text holds one) is a mistake or an attack, refused with 413 or 400
and a clear message before any view sees it."""

from __future__ import annotations

import io
import re
from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, status

MAX_DEPTH = 16  # a job body is two levels deep (env, labels, annotations, command)
# JSON's \ud800 escapes decode to lone surrogates, which no UTF-8 text holds: PostgreSQL's
# driver cannot encode one and neither can the response that would quote it back. Query strings
# and forms cannot carry one: Django decodes them as UTF-8 with replacement characters, and a
# request naming another charset is refused before that (gpuqueue/ops/request_guard.py).
LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
SURROGATE_MESSAGE = (
    "Lone surrogate characters (\\ud800-\\udfff escapes without their pair) are not allowed: "
    "text must be valid Unicode."
)


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "The request body is too large."


class LimitedJSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        # A declared length over the limit was refused before any view (ops/request_guard);
        # this caps what is read whatever the headers said.
        limit = int(getattr(settings, "GPUQUEUE_API_MAX_BODY_BYTES", 64 * 1024))
        if stream is None:
            return super().parse(stream, media_type, parser_context)
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise RequestTooLarge(f"The request body is over {limit} bytes.")
        try:
            data = super().parse(io.BytesIO(body), media_type, parser_context)
        except RecursionError as exc:
            raise exceptions.ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.") from exc
        check_plain(data)
        return data


def check_plain(data: Any, depth: int = 0) -> None:
    """Refuse NUL characters and lone surrogates anywhere (keys included) and nesting deeper than
    MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise exceptions.ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.")
    if isinstance(data, str):
        if "\x00" in data:
            raise exceptions.ParseError("NUL characters are not allowed.")
        if LONE_SURROGATE.search(data):
            raise exceptions.ParseError(SURROGATE_MESSAGE)
    elif isinstance(data, dict):
        for key, value in data.items():
            check_plain(key, depth + 1)
            check_plain(value, depth + 1)
    elif isinstance(data, list):
        for value in data:
            check_plain(value, depth + 1)
