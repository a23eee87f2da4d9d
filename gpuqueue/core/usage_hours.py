"""Splitting a span of time into clock hours, the GPU-hours ledger's unit (standard library)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

HOUR = timedelta(hours=1)


def hour_of(at: datetime) -> datetime:
    """The start of the UTC clock hour that holds `at`."""
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def split_by_hour(start: datetime, end: datetime) -> list[tuple[datetime, float]]:
    """[(hour, seconds of [start, end) within it)], oldest first; nothing for an empty span.

    The seconds add up to (end - start) exactly as floats allow: each hour's share is a
    difference of the same two clocks, so no rounding gathers over a long run.
    """
    if end <= start:
        return []
    spans = []
    hour = hour_of(start)
    while hour < end:
        following = hour + HOUR
        seconds = (min(end, following) - max(start, hour)).total_seconds()
        if seconds > 0:
            spans.append((hour, seconds))
        hour = following
    return spans
