"""The dashboard's pure arithmetic: bars, charts, cells, idle iron; and the sampling task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dashboard.geometry import bar_scale, node_cells, quota_bar, stacked_chart, step_path
from gpuqueue.services.accounting.utilization import (
    PendingShape,
    gang_fits,
    idle_gpu_hours,
    waiting_fit_gpus,
)


def test_a_bar_splits_allocation_at_the_guarantee_and_adds_pending() -> None:
    bar = quota_bar(guarantee=8, limit=32, fair_share=16, allocated=12, pending=8, scale=32)
    assert (bar.within, bar.borrowed, bar.pending) == (25.0, 12.5, 25.0)
    assert (bar.guarantee, bar.fair_share, bar.limit) == (25.0, 50.0, 100.0)
    assert bar.pending_x == 37.5


def test_a_bar_never_draws_past_its_scale() -> None:
    bar = quota_bar(guarantee=4, limit=8, fair_share=8, allocated=6, pending=100, scale=8)
    assert bar.within + bar.borrowed + bar.pending == 100.0
    assert quota_bar(guarantee=0, limit=0, fair_share=0, allocated=0, pending=0, scale=0).limit == 0


def test_the_scale_is_the_longest_thing_to_draw() -> None:
    assert bar_scale([(32, 16, 8, 4), (8, 8, 30, 20)]) == 50
    assert bar_scale([]) == 1


def test_step_paths_hold_each_value_until_the_next_sample() -> None:
    assert step_path([(0, 10), (5, 10), (10, 4)]) == "M0,10H5H10V4"
    assert step_path([]) == ""


def test_a_stacked_chart_puts_teams_under_the_capacity_line() -> None:
    start = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    times = [start + timedelta(minutes=m) for m in range(0, 60, 10)]
    chart = stacked_chart(
        times,
        [64] * 6,
        [("a", "#111", [8] * 6), ("b", "#222", [0] * 6)],
        start,
        start + timedelta(hours=1),
    )
    assert chart.y_max == 64 and [a.name for a in chart.areas] == ["a"]  # b had nothing
    assert [t.label for t in chart.y_ticks] == ["0", "32", "64"]  # the axis is the capacity
    over = stacked_chart(
        times, [64] * 6, [("a", "#111", [70] * 6)], start, start + timedelta(hours=1)
    )
    assert over.y_max == 70  # nodes left under running work: the allocation still fits
    assert chart.areas[0].path.endswith("Z")
    assert [t.label for t in chart.x_ticks] == [
        "12:10",
        "12:20",
        "12:30",
        "12:40",
        "12:50",
        "13:00",
    ]
    assert stacked_chart([], [], [], start, start + timedelta(hours=1)).empty


def test_node_cells_list_holders_then_outside_pods_then_free() -> None:
    cells = node_cells(8, [("team-a", 1, 4), ("team-b", None, 2)], external=1)
    assert [c.team for c in cells] == ["team-a"] * 4 + ["team-b"] * 2 + ["external", None]
    assert len(node_cells(2, [("team-a", 1, 4)], external=0)) == 2  # a stale row is cut


def test_a_gang_fits_only_whole_workers_on_single_nodes() -> None:
    assert gang_fits({"n1": 4, "n2": 4}, workers=2, gpus_per_worker=4)
    assert not gang_fits({"n1": 3, "n2": 3}, workers=1, gpus_per_worker=4)  # 6 free, no node has 4
    assert gang_fits({"n1": 8}, workers=4, gpus_per_worker=2)


def test_waiting_fit_counts_policy_holds_that_fit_and_nothing_else() -> None:
    free = {"n1": 4, "n2": 2}
    pending = [
        PendingShape(1, 2, "over_limit"),  # fits, held by the team's limit: counts 2
        PendingShape(1, 4, "queued_behind_team"),  # fits: counts 4
        PendingShape(1, 8, "over_limit"),  # does not fit on any node
        PendingShape(1, 1, "no_capacity"),  # the engine saw no room when it judged
        PendingShape(1, 1, None),  # no cycle has judged it yet
    ]
    assert waiting_fit_gpus(free, pending) == 6


def test_idle_iron_is_the_smaller_of_free_and_waiting_per_minute() -> None:
    # 60 minutes with 10 free and 4 waiting, 60 with 2 free and 8 waiting, 30 with nothing waiting.
    minutes = [(10, 4)] * 60 + [(2, 8)] * 60 + [(16, 0)] * 30
    assert idle_gpu_hours(minutes) == pytest.approx(6.0)


@pytest.mark.django_db
def test_sampling_writes_cluster_and_team_rows_once_a_minute(jobs: Any, world: Any) -> None:
    from gpuqueue.models import Job, UtilizationSample
    from gpuqueue.services.accounting.utilization import sample_utilization
    from tests.standings import show

    # A pending 1 × 2 job of team-b held by its limit while h100-1 has 6 GPUs free.
    Job.objects.filter(pk=jobs.b_running.pk).update(state="RUNNING")
    held = Job.objects.create(
        team=world.team_b,
        user=world.carol,
        flavor=world.h100,
        name="held",
        image="x",
        workers=1,
        gpus_per_worker=2,
    )
    show(held.pk, reason={"code": "over_limit", "numbers": {}})
    at = datetime(2026, 1, 5, 12, 0, 30, tzinfo=UTC)
    assert sample_utilization(at) > 0
    assert sample_utilization(at + timedelta(seconds=20)) == 0  # same minute: nothing more
    cluster = UtilizationSample.objects.get(flavor=world.h100, team=None)
    # Ready h100 nodes: 0, 1 and the cordoned 2 (NotReady 3 does not count).
    assert (cluster.capacity, cluster.allocated) == (24, 10)
    assert cluster.pending == 32 + 2
    team_a = UtilizationSample.objects.get(flavor=world.h100, team=world.team_a)
    assert (team_a.allocated, team_a.pending) == (8, 32)
    idle = cluster  # the cluster's row keeps the minute's idle iron
    # Free for new work: h100-0 0 and h100-1 6 (the cordoned and NotReady nodes take nothing).
    # alice's 4 × 8 job waits for capacity; team-b's 1 × 2 job would fit but is held.
    assert (idle.free, idle.waiting_fit) == (6, 2)


@pytest.mark.django_db
def test_the_overview_shows_the_fair_shares_the_cycle_admitted_by(jobs: Any) -> None:
    from django.utils import timezone

    from dashboard.overview import queue_overview
    from gpuqueue.cycle.run import run_cycle
    from gpuqueue.cycle.snapshot import load_snapshot
    from gpuqueue.scheduler.fairshare import fair_shares

    now = timezone.now()
    planned = fair_shares(load_snapshot(now))
    run_cycle(now=now)
    shown = {(row.team, f.flavor): row.fair_share for f in queue_overview() for row in f.rows}
    assert shown and shown == {key: planned[key] for key in shown}
