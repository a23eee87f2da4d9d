"""`gpuqueue usage` against a live server."""

from __future__ import annotations

import csv
import io
from typing import Any


def test_usage_prints_a_table_with_totals_and_the_teams_guarantee(
    cli: Any, ledger: Any, capsys: Any
) -> None:
    assert cli("usage", "--since", "2026-03-01", "--until", "2026-03-03", persona="bob") == 0
    out = capsys.readouterr().out
    assert "2026-03-02  team-a        bob           h100           16.0" in out
    assert "total 31.0 GPU-hours, 2.0 lost to preemption" in out
    assert "team-a        h100           30.0      384.0      8" in out
    assert "carol" not in out


def _team_b_csv(*argv: str) -> list[str]:
    """The arguments of `gpuqueue usage --csv` for team-b over the ledger's two days."""
    window = ("--team", "team-b", "--since", "2026-03-01", "--until", "2026-03-03")
    return ["usage", *window, *argv, "--csv"]


def test_usage_csv_by_month_for_one_team(cli: Any, ledger: Any, capsys: Any) -> None:
    code = cli(*_team_b_csv("--by", "month"), persona="root")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["period"], r["user"], float(r["gpu_hours"])) for r in rows] == [
        ("2026-03-01", "carol", 3.0)
    ]


def test_usage_with_a_bad_date_names_the_field_and_exits_4(
    cli: Any, ledger: Any, capsys: Any
) -> None:
    assert cli("usage", "--since", "last tuesday") == 4
    assert "since" in capsys.readouterr().err


def test_usage_csv_keeps_a_name_that_starts_like_a_formula_as_text(
    cli: Any, ledger: Any, capsys: Any
) -> None:
    from django.contrib.auth import get_user_model

    ledger.carol.username = "@carol"  # usernames may start with @ + -
    ledger.carol.save(update_fields=["username"])
    assert get_user_model().objects.filter(username="@carol").exists()
    code = cli(*_team_b_csv(), persona="root")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["user"] for r in rows] == ["'@carol"]
