"""`manage.py whatif`: recorded submissions replayed with changed quotas."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.models import Job, Quota
from gpuqueue.scheduler.model import Quota as EngineQuota
from gpuqueue.scheduler.model import Team
from gpuqueue.services.forecasts.whatif import (
    QuotaSpecError,
    apply_changes,
    parse_quota_change,
    recorded_duration,
)


def test_a_quota_change_is_parsed_or_refused_with_the_expected_form() -> None:
    change = parse_quota_change("team-b=h100:16:48:2")
    assert (change.team, change.flavor, change.quota) == (
        "team-b",
        "h100",
        EngineQuota(16, 48, 2.0),
    )
    for bad in ("team-b=h100:16:48", "team-b:h100:1:2:1", "team-b=h100:9:8:1", "B=h100:1:2:1"):
        with pytest.raises(QuotaSpecError):
            parse_quota_change(bad)


def test_changes_apply_to_one_team_and_an_unknown_team_is_refused() -> None:
    teams = (Team("a", {"h100": EngineQuota(8, 8)}), Team("b", {"h100": EngineQuota(8, 8)}))
    changed = apply_changes(teams, [parse_quota_change("b=h100:0:32:1")])
    assert changed[0] == teams[0] and changed[1].quotas["h100"] == EngineQuota(0, 32, 1.0)
    with pytest.raises(QuotaSpecError, match="no team 'c'"):
        apply_changes(teams, [parse_quota_change("c=h100:0:32:1")])


def test_recorded_durations() -> None:
    now = timezone.now()
    row = {
        "started_at": now - timedelta(seconds=50),
        "finished_at": now,
        "expected_runtime_seconds": None,
        "max_runtime_seconds": None,
    }
    assert recorded_duration(row, now) == 50
    assert recorded_duration({**row, "started_at": None}, now) is None  # cancelled before running
    assert (
        recorded_duration({**row, "finished_at": None, "expected_runtime_seconds": 500}, now) == 500
    )
    assert (
        recorded_duration(
            {**row, "started_at": None, "finished_at": None, "max_runtime_seconds": 70}, now
        )
        == 70
    )


def test_raising_a_limit_shortens_that_teams_waits(world: Any, submit: Any, backend: Any) -> None:
    sync_cluster(backend)
    Quota.objects.filter(team=world.team_b, flavor=world.h100).update(guarantee=8, limit=8)
    start = timezone.now() - timedelta(days=1)
    for _ in range(4):  # four 8-GPU jobs at once, 10 minutes each: one at a time under limit 8
        job = submit(user=world.carol, team=world.team_b, gpus_per_worker=8)
        Job.objects.filter(pk=job.pk).update(
            state=JobState.SUCCEEDED,
            submitted_at=start,
            started_at=start,
            finished_at=start + timedelta(minutes=10),
        )
    out = StringIO()
    call_command("whatif", "--days", "2", "--quota", "team-b=h100:8:32:1", stdout=out)
    text = out.getvalue()
    assert "Replayed 4 jobs" in text
    line = next(row for row in text.splitlines() if row.startswith("team-b"))
    _, jobs, before, after, change = line.split()
    assert jobs == "4" and float(before.rstrip("m")) > 10 and float(after.rstrip("m")) < 1
    assert change == "-100%"
    assert Quota.objects.get(team=world.team_b, flavor=world.h100).limit == 8  # nothing written


def test_a_bad_quota_spec_is_a_clear_error(world: Any) -> None:
    with pytest.raises(CommandError, match="TEAM=FLAVOR:GUARANTEE:LIMIT:WEIGHT"):
        call_command("whatif", "--quota", "team-b=h100")
    with pytest.raises(CommandError, match="no flavor 'a100'"):
        call_command("whatif", "--quota", "team-b=a100:1:2:1")
