"""Utilization history: allocated against capacity per flavor and team over a window, drawn
from the minute samples, and the idle-iron figure (defined in
gpuqueue/services/accounting/utilization.py)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, DateTimeField, F, Func, Sum, Value
from django.db.models.functions import Least
from django.utils import timezone

from dashboard.geometry import Chart, stacked_chart, team_colours
from gpuqueue.models import Flavor, UtilizationSample
from gpuqueue.services.accounting.utilization import SAMPLE_MINUTES
from teams.models import Team

# window name -> (length, bucket): about 60–170 points per chart whatever the window.
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "hour": (timedelta(hours=1), timedelta(minutes=1)),
    "day": (timedelta(days=1), timedelta(minutes=10)),
    "week": (timedelta(days=7), timedelta(hours=1)),
}
ORIGIN = datetime(2000, 1, 3, tzinfo=UTC)  # a Monday at midnight: buckets start on round times


def parse_window(value: str | None) -> str:
    return value if value in WINDOWS else "hour"


@dataclass(frozen=True)
class TeamHours:
    team: str
    colour: str
    allocated_hours: float
    share: int  # percent of the flavor's allocated GPU-hours


@dataclass
class FlavorHistory:
    flavor: str
    chart: Chart
    capacity_hours: float = 0.0
    allocated_hours: float = 0.0
    free_hours: float = 0.0
    idle_iron_hours: float = 0.0
    teams: list[TeamHours] = field(default_factory=list)

    @property
    def utilization(self) -> int:
        return round(self.allocated_hours * 100 / self.capacity_hours) if self.capacity_hours else 0


@dataclass
class History:
    window: str
    start: datetime
    end: datetime
    flavors: list[FlavorHistory]
    colours: dict[str, str]

    @property
    def idle_iron_hours(self) -> float:
        return round(sum(f.idle_iron_hours for f in self.flavors), 1)


def _bucket(size: timedelta) -> Func:
    # PostgreSQL's date_bin: the start of the `size` bucket that holds `at`.
    return Func(
        Value(size), F("at"), Value(ORIGIN), function="date_bin", output_field=DateTimeField()
    )


def utilization_history(window: str, now: datetime | None = None) -> History:
    """1. Sums and counts per bucket, flavor and team (one grouped query): averages for the
       chart, sums for the GPU-hours.
    2. Idle iron per flavor: Σ min(free, waiting_fit) over the window's minutes (one query).
    3. A stacked chart per flavor: teams' allocation under the cluster's capacity."""
    length, size = WINDOWS[window]
    end = now or timezone.now()
    start = end - length
    flavors = dict(Flavor.objects.values_list("id", "name"))
    teams = dict(Team.objects.values_list("id", "slug"))
    colours = team_colours(list(teams.values()))
    samples = UtilizationSample.objects.filter(at__gte=start, at__lte=end)
    series: dict[int, dict[int | None, dict[datetime, tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    hours = SAMPLE_MINUTES / 60
    totals: dict[tuple[int, int | None], tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
    # Sums and counts per bucket give both the chart (averages) and the window's GPU-hours
    # (sums) from one scan of the samples.
    rows: Any = (
        samples.annotate(bucket=_bucket(size))
        .values("flavor_id", "team_id", "bucket")
        .annotate(capacity=Sum("capacity"), allocated=Sum("allocated"), n=Count("id"))
        .order_by()
    )
    for row in rows:
        key = (row["flavor_id"], row["team_id"])
        series[key[0]][key[1]][row["bucket"]] = (
            row["capacity"] / row["n"],
            row["allocated"] / row["n"],
        )
        capacity, allocated = totals[key]
        totals[key] = (capacity + row["capacity"] * hours, allocated + row["allocated"] * hours)
    idle: dict[int, tuple[float, float]] = {
        row["flavor_id"]: (row["free_minutes"] * hours, row["idle"] * hours)
        for row in samples.filter(team=None, free__isnull=False)
        .annotate(idle_minutes=Least("free", "waiting_fit"))
        .values("flavor_id")
        .annotate(free_minutes=Sum("free"), idle=Sum("idle_minutes"))
        .order_by()
    }
    out = []
    for flavor_id, name in sorted(flavors.items(), key=lambda kv: kv[1]):
        by_team = series.get(flavor_id, {})
        cluster = by_team.get(None, {})
        times = sorted(cluster)
        stacks = [
            (
                teams[team_id],
                colours[teams[team_id]],
                [by_team[team_id].get(t, (0.0, 0.0))[1] for t in times],
            )
            for team_id in sorted((k for k in by_team if k is not None), key=lambda k: teams[k])
        ]
        chart = stacked_chart(times, [cluster[t][0] for t in times], stacks, start, end)
        capacity_hours, allocated_hours = totals.get((flavor_id, None), (0.0, 0.0))
        free_hours, idle_hours = idle.get(flavor_id, (0.0, 0.0))
        team_hours = []
        for team_id in sorted((k for k in by_team if k is not None), key=lambda k: teams[k]):
            team_alloc = totals.get((flavor_id, team_id), (0.0, 0.0))[1]
            team_hours.append(
                TeamHours(
                    teams[team_id],
                    colours[teams[team_id]],
                    round(team_alloc, 1),
                    round(team_alloc * 100 / allocated_hours) if allocated_hours else 0,
                )
            )
        out.append(
            FlavorHistory(
                name,
                chart,
                round(capacity_hours, 1),
                round(allocated_hours, 1),
                round(free_hours, 1),
                round(idle_hours, 1),
                team_hours,
            )
        )
    return History(window, start, end, out, colours)
