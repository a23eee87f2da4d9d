"""The dashboard's usage page, its CSV export, and idle GPUs on the job page, the job list and
the utilization page (Django's test client; the browser test drives the same pages)."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

MARCH = {"since": "2026-03-01", "until": "2026-03-03"}


@pytest.mark.parametrize(
    ("persona", "sees", "hidden"),
    [
        ("root", ["alice", "bob", "carol", 'id="usage-teams"'], []),
        ("bob", ["alice", "bob", 'id="usage-teams"'], ["carol"]),
        ("alice", ["alice", "(your own jobs)"], ["bob", "carol", 'id="usage-teams"']),
        ("carol", ["carol"], ["alice", "bob"]),
    ],
)
def test_the_usage_page_shows_what_each_role_may_see(
    clients: Any, ledger: Any, persona: str, sees: list[str], hidden: list[str]
) -> None:
    response = clients[persona].get("/usage/", MARCH)
    assert response.status_code == 200
    rows = response.content.decode().split('id="usage-rows"', 1)[1]
    page = response.content.decode()
    for text in sees:
        assert text in (rows if text in ("alice", "bob", "carol") else page)
    for text in hidden:
        assert text not in (rows if text in ("alice", "bob", "carol") else page)


def test_signed_out_visitors_are_sent_to_sign_in(clients: Any, ledger: Any) -> None:
    response = clients["anonymous"].get("/usage/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_team_totals_against_guarantee(clients: Any, ledger: Any) -> None:
    page = clients["bob"].get("/usage/", MARCH).content.decode()
    teams = page.split('id="usage-teams"', 1)[1].split("</table>", 1)[0]
    assert "30.00" in teams and "384" in teams and "8 %" in teams  # 30 of 8 GPUs × 48 h
    assert 'bob <span class="muted">team-a</span> 16.00 GPU-hours' in page


def test_bad_filters_come_back_as_422_with_the_field(clients: Any, ledger: Any) -> None:
    response = clients["root"].get("/usage/", {"by": "year"})
    assert response.status_code == 422
    assert "by: Use one of day, week, month; got &#x27;year&#x27;." in response.content.decode()


def test_the_csv_export_has_the_pages_filters(clients: Any, ledger: Any) -> None:
    response = clients["root"].get("/usage/", {**MARCH, "team": "team-b", "export": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["period"], r["team"], r["user"], r["gpu_hours"]) for r in rows] == [
        ("2026-03-01", "team-b", "carol", "3.0000")
    ]


def test_the_page_links_its_csv_with_the_same_filters(clients: Any, ledger: Any) -> None:
    page = clients["root"].get("/usage/", {**MARCH, "flavor": "l4"}).content.decode()
    assert 'href="?since=2026-03-01&amp;until=2026-03-03&amp;flavor=l4&amp;export=csv"' in page
