"""Cursor pagination everywhere: stable under inserts (a pipeline paging through its jobs
while others submit sees no row twice) and cheap at any depth."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination


class NewestFirst(CursorPagination):
    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request: Any) -> Cursor | None:
        """DRF checks a cursor's encoding but not that its position fits the ordering's column;
        a tampered one would reach the database as a bad comparison (a 500): 404 instead."""
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            ordering = self.ordering  # a tuple once DRF resolved it for this request
            first = ordering[0] if isinstance(ordering, (list, tuple)) else ordering
            field = self._model._meta.get_field(first.lstrip("-"))
            try:
                field.to_python(cursor.position)
            except (ValidationError, ValueError, OverflowError) as exc:
                raise NotFound(self.invalid_cursor_message) from exc
            if field.get_internal_type().endswith("AutoField") and not (
                -(2**63) <= int(cursor.position) < 2**63
            ):
                raise NotFound(self.invalid_cursor_message)
        return cursor


class OldestFirst(NewestFirst):
    ordering = "id"


class SamplesNewestFirst(NewestFirst):
    ordering = "-at"
    max_page_size = 5000
