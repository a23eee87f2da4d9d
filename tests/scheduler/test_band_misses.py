"""The band stretched by what earlier bands missed by (gpuqueue/scheduler/band_misses.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuqueue.scheduler.band import Estimate
from gpuqueue.scheduler.band_misses import (
    SAMPLE_SHARE,
    WINDOW,
    BandSample,
    chosen,
    least_score,
    miss_score,
    product_limit_quantile,
    widen,
    widening,
)

NOW = 1_000_000.0
HOUR = 3600.0


def late_by(factor: float, count: int, late: float = HOUR) -> list[BandSample]:
    """`count` forecasts of bands (late / 2, late) whose jobs started `factor` x late after."""
    return [
        BandSample(NOW - 2 * HOUR - i, late / 2, late, NOW - 2 * HOUR - i + factor * late)
        for i in range(count)
    ]


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=60), st.floats(0.01, 1.0))
def test_with_no_bound_the_product_limit_quantile_is_the_plain_one(
    values: list[int], q: float
) -> None:
    ordered = sorted(values)
    expected = ordered[math.ceil(q * len(ordered) - 1e-9) - 1]
    assert product_limit_quantile(((v, True) for v in values), q) == expected


def test_a_job_still_waiting_counts_as_a_bound_not_as_nothing() -> None:
    """Starts at 1, 2, 3 and 4, and one still waiting past 2.5. Kaplan-Meier: 1 - S is 0.2,
    0.4 after 2, then 0.7 after 3 (two at risk). Dropping the waiting one would give 2."""
    scores = [(1.0, True), (2.0, True), (2.5, False), (3.0, True), (4.0, True)]
    assert product_limit_quantile(scores, 0.4) == 2.0
    assert product_limit_quantile(scores, 0.5) == 3.0
    assert product_limit_quantile([(s, True) for s, _ in scores if s != 2.5], 0.5) == 2.0


def test_a_quantile_beyond_every_start_is_infinite() -> None:
    assert product_limit_quantile([(1.0, True)] + [(5.0, False)] * 4, 0.8) == math.inf


def test_scores_are_negative_inside_the_band_and_the_log_factor_missed_outside() -> None:
    assert miss_score(100, 1000, 300) < 0
    assert miss_score(100, 1000, 3000) == pytest.approx(math.log(3))
    assert miss_score(1000, 5000, 250) == pytest.approx(math.log(4))
    assert miss_score(0, 10, 0) == 0.0  # waits under a cycle count as a cycle
    # Still waiting after 3,000 s: at least log 3; after 200 s, at best the band's middle.
    assert least_score(100, 1000, 3000) == pytest.approx(math.log(3))
    assert least_score(100, 1000, 200) == pytest.approx(-0.5 * math.log(10))
    assert least_score(100, math.inf, 5000) == -math.inf


def test_starts_at_twice_the_late_end_stretch_the_band_twofold() -> None:
    assert widening(late_by(2.0, 60), NOW) == pytest.approx(math.log(2))


def test_bands_that_held_every_start_narrow() -> None:
    """Every start at the band's middle (geometric): a band shrunk towards it holds them all."""
    by = widening(late_by(math.sqrt(0.5), 60), NOW)
    assert by == pytest.approx(-0.5 * math.log(2))


def test_too_few_starts_leave_the_band_as_it_is() -> None:
    samples = late_by(2.0, 49)
    assert widening(samples, NOW) is None
    estimate = Estimate(NOW + 100, NOW + 50, NOW + 200)
    assert widen(estimate, NOW, None) is estimate


def test_starts_after_the_time_of_learning_are_not_known_yet() -> None:
    """The same forecasts learnt from an hour earlier: what started in between still waits."""
    samples = late_by(2.0, 60) + late_by(0.75, 200)
    earlier = NOW - 0.5 * HOUR
    unknown = [BandSample(s.at, s.early, s.late) if s.left > earlier else s for s in samples]
    assert widening(samples, earlier) == widening(unknown, earlier)
    assert widening(samples, NOW) != widening(samples, earlier)


def test_jobs_still_waiting_far_past_their_band_open_it() -> None:
    """50 starts inside their bands and 50 still waiting at 4x their late end: fewer than 80 %
    of the outcomes can be inside any stretch that the starts tell; the band opens."""
    waiting = [BandSample(NOW - 4 * HOUR, HOUR / 2, HOUR) for _ in range(50)]
    by = widening(late_by(0.75, 50) + waiting, NOW)
    assert by == math.inf
    assert widen(Estimate(NOW + 100, NOW + 50, NOW + 200), NOW, by) == Estimate(NOW + 100, NOW)


def test_a_job_cancelled_before_it_started_is_a_bound_not_a_start() -> None:
    """Cancelled 1.5 h after a forecast of (0.5 h, 1 h): it would have started after 1.5 h at
    the earliest. Not a start (40 starts are too few), and no start at 1.5 h either: taken as
    starts, the 200 would be 80 % of the outcomes."""
    cancelled = [
        BandSample(NOW - 4 * HOUR, HOUR / 2, HOUR, NOW - 2.5 * HOUR, started=False)
        for _ in range(200)
    ]
    assert widening(late_by(2.0, 40) + cancelled, NOW) is None
    assert widening(late_by(2.0, 50) + cancelled, NOW) == pytest.approx(math.log(2))
    as_starts = [BandSample(s.at, s.early, s.late, s.left) for s in cancelled]
    assert widening(late_by(2.0, 50) + as_starts, NOW) == pytest.approx(math.log(1.5))


def test_forecasts_older_than_the_window_are_forgotten() -> None:
    old = [BandSample(s.at - WINDOW, s.early, s.late, s.left - WINDOW) for s in late_by(9, 100)]
    assert widening(late_by(2.0, 60) + old, NOW) == pytest.approx(math.log(2))


@given(
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.one_of(st.none(), st.floats(-5, 5)),
)
def test_the_stretched_band_holds_the_most_likely_start(
    early: float, likely: float, late: float, by: float | None
) -> None:
    early, likely, late = sorted((early, likely, late))
    stretched = widen(Estimate(NOW + likely, NOW + early, NOW + late), NOW, by)
    assert stretched.likely == NOW + likely
    assert stretched.early is not None and stretched.late is not None
    assert NOW <= stretched.early <= stretched.likely <= stretched.late


def test_one_job_in_eight_is_sampled_each_hour_a_different_set() -> None:
    hours = [[job for job in range(8000) if chosen(job, h * HOUR)] for h in range(3)]
    for sampled in hours:
        assert len(sampled) == pytest.approx(8000 / SAMPLE_SHARE, rel=0.1)
    assert len(set(hours[0]) & set(hours[1])) < 8000 / SAMPLE_SHARE / 2
