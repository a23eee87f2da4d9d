"""An estimated start that moves later says how often and why (services/forecasts/moves.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone

from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import FORECAST_AT_KEY, refresh_forecasts, run_cycle
from gpuqueue.services.forecasts.moves import (
    BORROWED,
    NEWER_OWN_TEAM,
    RAN_LONGER,
    STARTED_AHEAD,
    Started,
    cause_of,
    later_text,
    moved_later,
    updated,
)


@pytest.fixture
def no_forecast_yet() -> Any:
    cache.delete(FORECAST_AT_KEY)
    yield
    cache.delete(FORECAST_AT_KEY)


def test_a_promised_start_taken_by_another_teams_borrowing_gang_says_so(
    world: Any, submit: Any, backend: Any, client: Any, no_forecast_yet: None
) -> None:
    """Team a's 4 x 8 gang should start when its team's 8-GPU job ends in an hour; then team
    b's 3 x 8 gang borrows the 24 free GPUs for three hours, and the estimate moves later."""
    sync_cluster(backend)
    t0 = timezone.now()
    submit(gpus_per_worker=8, max_runtime_seconds=3600)
    run_cycle(backend=backend, now=t0)
    gang = submit(workers=4, gpus_per_worker=8, expected_runtime_seconds=3600)
    run_cycle(backend=backend, now=t0)
    refresh_forecasts(now=t0)
    gang.refresh_from_db()
    promised = gang.estimated_start
    assert promised is not None and promised <= t0 + timedelta(hours=1, minutes=5)
    assert "later" not in gang.forecast
    borrower = submit(
        world.carol, team=world.team_b, workers=3, gpus_per_worker=8, max_runtime_seconds=10800
    )
    run_cycle(backend=backend, now=t0 + timedelta(minutes=1))
    borrower.refresh_from_db()
    assert borrower.admitted_at is not None
    refresh_forecasts(now=t0 + timedelta(minutes=2))
    gang.refresh_from_db()
    assert gang.estimated_start > promised + timedelta(hours=1)
    assert gang.forecast["later"] == {
        "count": 1,
        "cause": {
            "code": BORROWED,
            "job": borrower.id,
            "team": "team-b",
            "workers": 3,
            "gpus_per_worker": 8,
        },
    }
    sentence = (
        f"Estimate moved later once; last: team team-b's job #{borrower.id} (3 × 8 GPUs) "
        f"borrowed the GPUs beyond its team's fair share."
    )
    client.force_login(world.alice)
    body = client.get(f"/api/v1/jobs/{gang.id}/").json()
    assert body["start_band"]["moved_later"] == 1
    assert body["start_band"]["moved_later_text"] == sentence
    page = client.get(f"/jobs/{gang.id}/").content.decode()
    assert sentence.replace("'", "&#x27;") in page
    # A forecast that finds the same start counts nothing more.
    refresh_forecasts(now=t0 + timedelta(minutes=3))
    gang.refresh_from_db()
    assert gang.forecast["later"]["count"] == 1


def test_a_move_is_later_by_more_than_the_forecasts_step() -> None:
    now = timezone.now()
    hour = now + timedelta(hours=1)
    assert not moved_later(None, hour, now)  # a first estimate
    assert not moved_later(hour, hour + timedelta(minutes=5), now)
    assert moved_later(hour, hour + timedelta(minutes=7), now)  # a tenth of the wait: 6 min
    assert not moved_later(hour, hour - timedelta(hours=1), now)  # earlier
    assert moved_later(hour, None, now)  # the promised start vanished


def test_the_cause_is_a_borrower_first_then_a_newer_job_of_the_team_then_any() -> None:
    now = timezone.now()
    older, newer = now - timedelta(hours=2), now - timedelta(minutes=1)
    own_newer = Started(2, "a", 1, 1, newer, False)
    other = Started(3, "c", 1, 8, older, False)
    borrower = Started(4, "b", 3, 8, newer, True)
    small_borrower = Started(5, "b", 1, 1, newer, True)
    since = now - timedelta(hours=1)
    assert cause_of("a", since, [own_newer, other, small_borrower, borrower])["job"] == 4
    assert cause_of("a", since, [own_newer, other])["code"] == NEWER_OWN_TEAM
    assert cause_of("a", since, [other])["code"] == STARTED_AHEAD
    assert cause_of("a", now, [own_newer])["code"] == STARTED_AHEAD  # submitted before it
    assert cause_of("a", since, []) == {"code": RAN_LONGER}
    assert cause_of("b", since, [borrower])["code"] == NEWER_OWN_TEAM  # its own team borrows


def test_moves_count_up_and_read_as_a_sentence() -> None:
    first = updated(None, {"code": RAN_LONGER})
    assert later_text(first) == (
        "Estimate moved later once; last: the jobs in its way are running longer than predicted."
    )
    third = updated(updated(first, {"code": RAN_LONGER}), cause_of("a", timezone.now(), []))
    assert third is not None and third["count"] == 3
    assert later_text(third).startswith("Estimate moved later 3 times;")
    assert updated(third, None) == third
    assert later_text(None) == ""
