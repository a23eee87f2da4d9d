"""GET /api/v1/usage/: who sees which GPU-hours, the filters, bad input, CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from typing import Any

import pytest

URL = "/api/v1/usage/"
MARCH = {"since": "2026-03-01", "until": "2026-03-03"}
MARCH_HOUR = datetime(2026, 3, 1, 12, tzinfo=UTC)


def _users(body: dict[str, Any]) -> dict[str, float]:
    got: dict[str, float] = {}
    for row in body["rows"]:
        got[row["user"]] = got.get(row["user"], 0) + row["gpu_hours"]
    return got


@pytest.mark.parametrize(
    ("persona", "want"),
    [
        ("root", {"alice": 15.0, "bob": 16.0, "carol": 3.0}),  # every team
        ("bob", {"alice": 15.0, "bob": 16.0}),  # team-a's admin: his team's users
        ("alice", {"alice": 15.0}),  # a member: her own
        ("carol", {"carol": 3.0}),
    ],
)
def test_each_persona_sees_the_gpu_hours_their_role_allows(
    api: Any, ledger: Any, persona: str, want: dict[str, float]
) -> None:
    response = api(persona).get(URL, MARCH)
    assert response.status_code == 200
    assert _users(response.json()) == pytest.approx(want)


def test_anonymous_callers_are_refused(api: Any, ledger: Any) -> None:
    assert api(None).get(URL, MARCH).status_code == 401


def test_rows_per_day_team_user_and_flavor_with_preemption_lost_apart(
    api: Any, ledger: Any
) -> None:
    body = api("root").get(URL, {**MARCH, "team": "team-a", "user": "alice"}).json()
    rows = {(r["period"], r["flavor"]): r for r in body["rows"]}
    assert rows.keys() == {("2026-03-01", "h100"), ("2026-03-02", "h100"), ("2026-03-02", "l4")}
    assert rows[("2026-03-01", "h100")]["gpu_hours"] == pytest.approx(12.0)
    assert rows[("2026-03-02", "h100")]["preempted_gpu_hours"] == pytest.approx(2.0)
    assert rows[("2026-03-01", "h100")]["preempted_gpu_hours"] == 0
    assert body["preempted_gpu_hours"] == pytest.approx(2.0)


def test_by_month_sums_the_days_and_a_flavor_filter_narrows(api: Any, ledger: Any) -> None:
    body = api("root").get(URL, {**MARCH, "by": "month", "flavor": "h100"}).json()
    assert {(r["period"], r["user"]): r["gpu_hours"] for r in body["rows"]} == pytest.approx(
        {("2026-03-01", "alice"): 14.0, ("2026-03-01", "bob"): 16.0, ("2026-03-01", "carol"): 3.0}
    )


def test_team_totals_stand_against_guarantee_times_the_window(api: Any, ledger: Any) -> None:
    """team-a's h100 guarantee is 8 GPUs; over two days that is 384 GPU-hours."""
    body = api("bob").get(URL, MARCH).json()
    team_a = {t["flavor"]: t for t in body["teams"] if t["team"] == "team-a"}
    assert team_a["h100"]["gpu_hours"] == pytest.approx(30.0)
    assert team_a["h100"]["guarantee_gpu_hours"] == pytest.approx(384.0)
    assert team_a["h100"]["percent_of_guarantee"] == pytest.approx(100 * 30 / 384)
    assert [t["team"] for t in body["teams"]] == ["team-a", "team-a"]  # bob sees his team only
    assert body["top_users"][0] == {"user": "bob", "team": "team-a", "gpu_hours": 16.0}


def test_a_team_admin_sees_totals_only_of_the_teams_they_administer(api: Any, ledger: Any) -> None:
    """bob administers team-a and is a plain member of team-b: his own GPU-hours there are
    rows of his, not team-b's total against team-b's guarantee."""
    from gpuqueue.models import UsageRecord
    from teams.models import Membership, Role

    Membership.objects.create(user=ledger.bob, team=ledger.team_b, role=Role.MEMBER)
    UsageRecord.objects.create(
        job_id=99,
        attempt=1,
        hour=MARCH_HOUR,
        team=ledger.team_b,
        user=ledger.bob,
        flavor=ledger.h100,
        gpus=1,
        gpu_seconds=3600.0,
        outcome="succeeded",
    )
    body = api("bob").get(URL, MARCH).json()
    assert ("team-b", "bob") in {(r["team"], r["user"]) for r in body["rows"]}
    assert {t["team"] for t in body["teams"]} == {"team-a"}


def test_members_see_no_team_totals(api: Any, ledger: Any) -> None:
    assert api("alice").get(URL, MARCH).json()["teams"] == []


def test_the_window_leaves_out_hours_before_since_and_from_until(api: Any, ledger: Any) -> None:
    body = api("root").get(URL, {"since": "2026-03-01T11:00:00Z", "until": "2026-03-02"}).json()
    assert _users(body) == pytest.approx({"alice": 4.0, "carol": 3.0})


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"by": "year"}, "by"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-03-02", "until": "2026-03-01"}, "until"),
        ({"since": "2020-01-01", "until": "2026-03-01"}, "since"),
        ({"team": "team-z"}, "team"),
        ({"flavor": "tpu"}, "flavor"),
        ({"user": "mallory"}, "user"),
    ],
)
def test_bad_filters_answer_400_at_the_field(
    api: Any, ledger: Any, query: dict[str, str], field: str
) -> None:
    response = api("root").get(URL, query)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ({"by": "year"}, "by", "Use one of day, week, month; got 'year'."),
        ({"since": "yesterday"}, "since", "Enter a date (2026-03-01) or an ISO time"),
        ({"until": "2026-13-01"}, "until", "Enter a date (2026-03-01) or an ISO time"),
        ({"until": "0001-01-02"}, "until", "An end this early needs a start too."),
    ],
)
def test_a_bad_period_or_date_says_what_is_accepted(
    api: Any, ledger: Any, query: dict[str, str], field: str, words: str
) -> None:
    response = api("root").get(URL, query)
    assert response.status_code == 400
    assert any(words in m for m in response.json()["error"]["fields"][field])


def test_names_that_start_like_formulas_stay_text_in_the_csv(api: Any, ledger: Any) -> None:
    """Usernames may start with + - @: a spreadsheet must show them, not evaluate them."""
    from django.contrib.auth import get_user_model

    from gpuqueue.models import UsageRecord

    for job_id, name in enumerate(("@SUM", "+1", "-2"), start=100):
        user = get_user_model().objects.create_user(name)
        UsageRecord.objects.create(
            job_id=job_id,
            attempt=1,
            hour=MARCH_HOUR,
            team=ledger.team_a,
            user=user,
            flavor=ledger.h100,
            gpus=1,
            gpu_seconds=3600.0,
            outcome="succeeded",
        )
    response = api("root").get(URL, {**MARCH, "format": "csv"})
    users = {r["user"] for r in csv.DictReader(io.StringIO(response.content.decode()))}
    assert {"'@SUM", "'+1", "'-2", "alice"} <= users
    assert api("root").get(URL, MARCH).json()["top_users"][0]["user"] == "bob"  # JSON unquoted


def test_csv_export_has_the_same_rows_as_json(api: Any, ledger: Any) -> None:
    client = api("bob")
    response = client.get(URL, {**MARCH, "format": "csv"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    lines = list(csv.DictReader(io.StringIO(response.content.decode())))
    as_json = client.get(URL, MARCH).json()["rows"]
    assert len(lines) == len(as_json) == 4
    assert {(r["period"], r["user"], r["flavor"], float(r["gpu_hours"])) for r in lines} == {
        (r["period"], r["user"], r["flavor"], r["gpu_hours"]) for r in as_json
    }
    assert client.get(URL, MARCH, HTTP_ACCEPT="text/csv")["Content-Type"].startswith("text/csv")


def test_a_csv_request_with_bad_filters_still_says_which_field(api: Any, ledger: Any) -> None:
    response = api("root").get(URL, {"format": "csv", "by": "year"})
    assert response.status_code == 400
    assert b'"by"' in response.content
