"""`?ordering=` for the job list: the query filter that names it (so that the strict filterset
knows it and the schema lists it) and the keyset cursor pagination that applies it.

DRF's CursorPagination pages by one column and skips ties by an offset, which grows without
bound on a column like `team` or `state` with thousands of equal values. Here a cursor is the
last row's (key, id) pair, and the next page is the rows after that pair: every page costs the
same however deep, and a cursor stays valid while rows are added. It also carries the instant
of its first page, so derived keys (waited, ran, GPU-hours) do not move between pages.
"""

from __future__ import annotations

import binascii
import json
import math
from base64 import urlsafe_b64decode, urlsafe_b64encode
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import django_filters as filters
from django import forms
from django.utils import timezone
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.utils.urls import replace_query_param

from gpuqueue.api.pagination import NewestFirst
from gpuqueue.api.parsers import LONE_SURROGATE
from gpuqueue.core.job_order import SORT_KEY, SORT_KEYS, Ordering, UnknownOrdering

ORDERING_PARAM = "ordering"
# The API lists newest first by default, as it always has.
API_DEFAULT = Ordering("id", descending=True)
_ID_RANGE = range(-(2**63), 2**63)


class OrderingField(forms.CharField):
    def validate(self, value: Any) -> None:
        super().validate(value)
        if value:
            try:
                Ordering.parse(value)
            except UnknownOrdering as exc:
                raise forms.ValidationError(str(exc), code="invalid_choice") from exc


class OrderingFilter(filters.CharFilter):
    """Known to the filterset and checked there (a wrong key: 400 listing the valid ones);
    applied by KeysetPagination, whose cursor must be built from the same key."""

    field_class = OrderingField

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault(
            "help_text",
            f"sort by one of {', '.join(SORT_KEYS)} (any case), '-' first for descending; "
            "ties by id. Default: -id (newest first).",
        )
        super().__init__(**kwargs)

    def filter(self, qs: Any, value: Any) -> Any:
        return qs


@dataclass(frozen=True)
class Cursor:
    ordering: Ordering
    position: Any
    job_id: int
    now: datetime
    backwards: bool

    def encode(self) -> str:
        position = self.position
        if isinstance(position, datetime):
            position = position.isoformat()
        raw = [str(self.ordering), position, self.job_id, self.now.isoformat(), self.backwards]
        return urlsafe_b64encode(json.dumps(raw, separators=(",", ":")).encode()).decode()

    @classmethod
    def decode(cls, text: str, ordering: Ordering) -> Cursor:
        """Raises ValueError for anything but a cursor of this ordering that this module
        wrote: a tampered position must not reach the database as a bad comparison."""
        try:
            raw = json.loads(urlsafe_b64decode(text.encode("ascii")))
        except (binascii.Error, UnicodeError, json.JSONDecodeError) as exc:
            raise ValueError("not a cursor") from exc
        if not isinstance(raw, list) or len(raw) != 5:
            raise ValueError("not a cursor")
        named, position, job_id, now, backwards = raw
        if named != str(ordering) or not isinstance(backwards, bool):
            raise ValueError("a cursor of another ordering")
        if type(job_id) is not int or job_id not in _ID_RANGE:
            raise ValueError("not an id")
        return cls(ordering, _position(ordering, position), job_id, _instant(now), backwards)


def _instant(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError("not a time")
    at = datetime.fromisoformat(value)
    if at.tzinfo is None:
        raise ValueError("a time without its zone")
    return at


def _position(ordering: Ordering, value: Any) -> Any:
    kind = ordering.sort_key.kind
    if kind is datetime:
        return _instant(value)
    if kind is int:
        if type(value) is not int or value not in _ID_RANGE:
            raise ValueError("not an integer key")
        return value
    if kind is float:
        # An integer too big for a float raises OverflowError in isfinite(): refused first.
        if type(value) is int and value not in _ID_RANGE:
            raise ValueError("not a number key")
        if type(value) not in (int, float) or not math.isfinite(value):
            raise ValueError("not a number key")
        return float(value)
    # NUL and lone surrogates (JSON's unpaired \ud800 escapes): text PostgreSQL cannot compare.
    if (
        not isinstance(value, str)
        or len(value) > 1024
        or "\x00" in value
        or LONE_SURROGATE.search(value)
    ):
        raise ValueError("not a text key")
    return value


def requested_ordering(request: Request, default: Ordering) -> Ordering:
    value = request.query_params.get(ORDERING_PARAM, "")
    if not value.strip():
        return default
    try:
        return Ordering.parse(value)
    except UnknownOrdering as exc:
        raise ValidationError({ORDERING_PARAM: [str(exc)]}) from exc


class KeysetPagination(NewestFirst):
    """Cursor pages of jobs in the requested ordering (see the module's docstring); the
    response keeps DRF's shape: next, previous, results."""

    default_ordering = API_DEFAULT

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        self.request = request
        self.page_size = self.get_page_size(request)
        self.base_url = request.build_absolute_uri()
        ordering = requested_ordering(request, self.default_ordering)
        cursor = self._cursor(request, ordering)
        now = cursor.now if cursor else timezone.now()
        backwards = cursor.backwards if cursor else False
        walk = ordering.reversed if backwards else ordering
        after = (cursor.position, cursor.job_id) if cursor is not None else None
        page = list(walk.page(queryset, now, 0, self.page_size + 1, after))
        more = len(page) > self.page_size
        page = page[: self.page_size]
        if backwards:
            page.reverse()
        has_next = more if not backwards else True
        has_previous = cursor is not None if not backwards else more
        self._links = {
            "next": self._link(ordering, page[-1], now, False) if has_next and page else None,
            "previous": self._link(ordering, page[0], now, True) if has_previous and page else None,
        }
        return page

    def _cursor(self, request: Request, ordering: Ordering) -> Cursor | None:
        text = request.query_params.get(self.cursor_query_param)
        if not text:
            return None
        try:
            return Cursor.decode(text, ordering)
        except ValueError as exc:
            raise NotFound(self.invalid_cursor_message) from exc

    def _link(self, ordering: Ordering, row: Any, now: datetime, backwards: bool) -> str:
        cursor = Cursor(ordering, getattr(row, SORT_KEY), row.pk, now, backwards)
        return replace_query_param(self.base_url, self.cursor_query_param, cursor.encode())

    def get_next_link(self) -> str | None:
        return self._links["next"]

    def get_previous_link(self) -> str | None:
        return self._links["previous"]

    def get_html_context(self) -> dict[str, Any]:
        return {"previous_url": self._links["previous"], "next_url": self._links["next"]}
