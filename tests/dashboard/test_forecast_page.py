"""The job page shows the estimated start's band and the runtime prediction behind it, or why
there is no estimate (templates/dashboard/partials/_job_forecast.html)."""

from __future__ import annotations

from typing import Any

from gpuqueue.cycle.run import refresh_forecasts
from tests.api.test_runtime_prediction import waiting_behind_the_h100s


def test_a_pending_job_page_shows_its_band_and_where_its_runtime_came_from(
    clients: Any, submit: Any, backend: Any
) -> None:
    waiting, now = waiting_behind_the_h100s(submit, backend)
    refresh_forecasts(now=now)
    page = clients["alice"].get(f"/jobs/{waiting.pk}/").content.decode()
    assert '<dd id="job-start-band">between ' in page and ", 10-90 %</dd>" in page
    assert (
        '<dd id="job-runtime-prediction">about 50 min (10-90 %: 34 min to 1 h 06 min), '
        "from 5 finished jobs of the same user and name</dd>" in page
    )


def test_without_history_the_page_says_why_there_is_no_estimate(
    clients: Any, submit: Any, backend: Any
) -> None:
    waiting, now = waiting_behind_the_h100s(submit, backend, history=False)
    refresh_forecasts(now=now)
    page = clients["alice"].get(f"/jobs/{waiting.pk}/").content.decode()
    assert "no runtime and no finished job like it to predict one from" in page
    assert 'id="job-runtime-prediction"' not in page
