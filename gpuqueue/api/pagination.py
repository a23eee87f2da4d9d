"""Cursor pagination everywhere: stable under inserts (a pipeline paging through its jobs
while others submit sees no row twice) and cheap at any depth."""

from __future__ import annotations

from rest_framework.pagination import CursorPagination


class NewestFirst(CursorPagination):
    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class OldestFirst(NewestFirst):
    ordering = "id"


class SamplesNewestFirst(NewestFirst):
    ordering = "-at"
    max_page_size = 5000
