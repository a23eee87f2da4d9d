"""The forecast as a researcher reads it, in the CLI and on the job page alike: which of the
stored forecast's parts show in which state, and the sentence each band and prediction makes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuqueue.client.forecast_text import band_text, runtime_text
from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.forecasts.runtime_history import runtime_prediction_of, start_band_of

NOW = datetime(2026, 11, 24, 13, 10, tzinfo=UTC)
EARLY = NOW + timedelta(hours=1, minutes=10)
PREDICTED = {"p10": 60, "p50": 120, "p90": 300, "source": "flavor", "samples": 1}
FORECAST = {
    "early": EARLY.isoformat(),
    "late": None,
    "why_none": None,
    "runtime": PREDICTED,
}


@pytest.mark.parametrize(
    ("state", "band", "runtime"),
    [
        (JobState.PENDING, True, True),
        (JobState.RUNNING, False, True),  # started: no start band, the prediction still
        (JobState.SUCCEEDED, False, False),  # ended: its own runtime says more
    ],
)
def test_which_parts_of_the_forecast_a_job_shows_in_each_state(
    state: JobState, band: bool, runtime: bool
) -> None:
    job = Job(state=state, forecast=FORECAST)
    assert (start_band_of(job) is not None) is band
    assert (runtime_prediction_of(job) == PREDICTED) is runtime


@pytest.mark.parametrize("forecast", [None, [], "soon", {"runtime": "50 min"}])
def test_a_missing_or_malformed_forecast_shows_nothing_rather_than_failing(
    forecast: object,
) -> None:
    job = Job(state=JobState.PENDING, forecast=forecast)
    assert runtime_prediction_of(job) is None
    assert runtime_text(runtime_prediction_of(job)) == ""
    band = start_band_of(job)
    assert band is None or band["early"] is None
    assert band_text(band, NOW) == ""


def test_no_estimate_is_said_with_its_reason() -> None:
    job = Job(state=JobState.PENDING, forecast={**FORECAST, "why_none": "never_fits"})
    assert band_text(start_band_of(job), NOW).startswith("It can never start as asked")


def test_the_band_is_worded_by_its_width() -> None:
    late = NOW + timedelta(hours=2, minutes=55)
    assert band_text({"early": EARLY.isoformat(), "late": late.isoformat()}, NOW) == (
        "between 2026-11-24 14:20 and 2026-11-24 16:05 UTC (in 1 h 10 min to 2 h 55 min), 10-90 %"
    )
    narrow = (EARLY + timedelta(seconds=20)).isoformat()
    assert band_text({"early": EARLY.isoformat(), "late": narrow}, NOW) == (
        "14:20 UTC (in 1 h 10 min)"
    )
    assert band_text({"early": EARLY.isoformat(), "late": None}, NOW) == (
        "not before 14:20 UTC (in 1 h 10 min); no late bound"
    )


def test_a_prediction_names_its_source_and_how_many_jobs_it_came_from() -> None:
    assert runtime_text(PREDICTED) == (
        "about 2 min (10-90 %: 1 min to 5 min), from 1 finished job of the same flavor and size"
    )
    declared = {"p10": 900, "p50": 900, "p90": 900, "source": "declared", "samples": 0}
    assert runtime_text(declared) == "declared: 15 min"
