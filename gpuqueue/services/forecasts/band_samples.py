"""The forecasts the band's stretch learns from, kept in PostgreSQL (scheduler/band_misses.py).

Once an hour the forecast keeps the band of the `chosen` share of the pending jobs, as
band.py gave it (before the stretch), and drops the samples older than the window. How long
each sampled job then waited is read from its timeline: its first JobEvent out of PENDING after
the sample (to ADMITTED: it started; to anything else: it left without starting). The stretch
is read at most every STRETCH_SECONDS per process: it moves with the hour's samples and the
starts since, not with each forecast.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime

from django.db.models import OuterRef, Subquery

from gpuqueue.core.caches import Kept
from gpuqueue.core.states import JobState
from gpuqueue.models import ForecastSample, JobEvent
from gpuqueue.scheduler.band import Estimate
from gpuqueue.scheduler.band_misses import SAMPLE_EVERY, WINDOW, BandSample, kept, widening

STRETCH_SECONDS = 600.0
# Kept as a 1-tuple: None is a value here (too few starts yet), and `Kept.get` says "not kept"
# with None.
_stretch: Kept[str, tuple[float | None]] = Kept(max_entries=1, max_age_seconds=STRETCH_SECONDS)
_ALWAYS = "current"


def _moment(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def keep_samples(now: float, estimates: Mapping[int, Estimate]) -> int:
    """Keep the chosen jobs' bands unless this hour's are kept already; returns how many rows
    were written. Samples older than the window go at the same time."""
    hour = int(now // SAMPLE_EVERY)
    if ForecastSample.objects.filter(hour=hour).exists():
        return 0
    rows = [
        ForecastSample(
            job_id=job_id,
            hour=hour,
            sampled_at=_moment(now),
            early_wait=max(early, 0.0),
            late_wait=None if math.isinf(late) else max(late, 0.0),
        )
        for job_id, (early, late) in kept(estimates, now).items()
    ]
    # Another worker's forecast of the same hour may have kept some of them: one row each.
    written = ForecastSample.objects.bulk_create(rows, ignore_conflicts=True)
    ForecastSample.objects.filter(sampled_at__lt=_moment(now - WINDOW)).delete()
    return len(written)


def band_samples(now: float) -> list[BandSample]:
    """The window's samples with what became of their jobs as of `now`."""
    leaving = JobEvent.objects.filter(
        job=OuterRef("job"),
        from_state=JobState.PENDING,
        at__gt=OuterRef("sampled_at"),
        at__lte=_moment(now),
    ).order_by("at", "id")
    rows = (
        ForecastSample.objects.filter(sampled_at__gte=_moment(now - WINDOW))
        .annotate(
            left=Subquery(leaving.values("at")[:1]),
            left_to=Subquery(leaving.values("to_state")[:1]),
        )
        .values_list("sampled_at", "early_wait", "late_wait", "left", "left_to")
    )
    return [
        BandSample(
            at.timestamp(),
            early,
            math.inf if late is None else late,
            None if left is None else left.timestamp(),
            left is None or left_to == JobState.ADMITTED,  # `started` means once left
        )
        for at, early, late, left, left_to in rows
    ]


def band_stretch(now: float) -> float | None:
    """`widening` over the kept samples (None: too few starts yet), read at most every
    STRETCH_SECONDS per process."""
    cached = _stretch.get("stretch", _ALWAYS)  # not `kept`: that names band_misses.kept here
    if cached is not None:
        return cached[0]
    by = widening(band_samples(now), now)
    _stretch.put("stretch", _ALWAYS, (by,))
    return by
