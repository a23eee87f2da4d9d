"""Reports from the GPU-hours ledger (`sacct`/`sreport` for GPUs): one filter form, one
visibility rule and the aggregates the API, the CSV export, the dashboard and the CLI show.

Who sees what: site admins every team; a team admin every user of the teams they administer;
anyone else their own usage only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncMonth, TruncWeek
from django.utils import timezone

from gpuqueue.core.csv_cells import USAGE_CSV_COLUMNS as CSV_COLUMNS
from gpuqueue.core.csv_cells import as_csv_cell
from gpuqueue.core.states import JobState
from gpuqueue.core.usage_hours import hour_of
from gpuqueue.models import FairShare, Flavor, JobActivity, Quota, UsageOutcome, UsageRecord
from teams.models import Membership, Role, Team

PERIODS = {"day": TruncDay, "week": TruncWeek, "month": TruncMonth}
DEFAULT_DAYS = 30
MAX_DAYS = 3 * 366
TOP_USERS = 10
EARLIEST = datetime(1, 1, 1, tzinfo=UTC)
BAD_TIME = "Enter a date (2026-03-01) or an ISO time (2026-03-01T10:00:00Z)."


def visible_usage(user: Any) -> QuerySet[UsageRecord]:
    """The one read filter for the ledger (see the module docstring)."""
    if not user.is_authenticated:
        return UsageRecord.objects.none()
    if user.is_superuser:
        return UsageRecord.objects.all()
    return UsageRecord.objects.filter(Q(team_id__in=_admin_of(user)) | Q(user_id=user.pk))


def _admin_of(user: Any) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user, role=Role.ADMIN).values("team_id")


def may_see_teams(user: Any) -> bool:
    """Whether the report shows teams' totals against quotas (admins of any kind)."""
    return bool(user.is_superuser or Membership.objects.filter(user=user, role=Role.ADMIN).exists())


class UsageFilterForm(forms.Form):
    """The report's filters, for every door: bad input is a field error, never a guess."""

    since = forms.DateTimeField(
        required=False,
        help_text="start (date or ISO time, UTC)",
        error_messages={"invalid": BAD_TIME},
    )
    until = forms.DateTimeField(
        required=False,
        help_text="end, excluded (default: now)",
        error_messages={"invalid": BAD_TIME},
    )
    team = forms.SlugField(required=False)
    user = forms.CharField(required=False, max_length=150)
    flavor = forms.SlugField(required=False)
    by = forms.ChoiceField(
        choices=[(p, p) for p in PERIODS],
        required=False,
        error_messages={"invalid_choice": f"Use one of {', '.join(PERIODS)}; got %(value)r."},
    )

    def clean_since(self) -> datetime | None:
        return _utc(self.cleaned_data.get("since"))

    def clean_until(self) -> datetime | None:
        return _utc(self.cleaned_data.get("until"))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        until = data.get("until") or timezone.now()
        if data.get("since") is None and until < EARLIEST + timedelta(days=DEFAULT_DAYS):
            self.add_error("until", "An end this early needs a start too.")
            return data  # the default start would fall before year 1
        since = data.get("since") or until - timedelta(days=DEFAULT_DAYS)
        if "since" in data and "until" in data:
            if since >= until:
                self.add_error("until", "The end must come after the start.")
            elif until - since > timedelta(days=MAX_DAYS):
                self.add_error("since", f"At most {MAX_DAYS} days at a time.")
        data["since"], data["until"] = since, until
        data["by"] = data.get("by") or "day"
        for field, model, key in (("team", Team, "slug"), ("flavor", Flavor, "name")):
            value = data.get(field)
            if value and not model.objects.filter(**{key: value}).exists():
                self.add_error(field, f"No {field} {value!r}.")
        if data.get("user") and not get_user_model().objects.filter(username=data["user"]).exists():
            self.add_error("user", f"No user {data['user']!r}.")
        return data


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    if timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # the first or last day of the calendar, shifted past its end
        raise forms.ValidationError("Not a representable date and time.") from None


@dataclass(frozen=True)
class UsageRow:
    period: datetime
    team: str
    user: str
    flavor: str
    gpu_hours: float
    preempted_gpu_hours: float
    used_gpu_hours: float | None
    idle_gpu_hours: float
    jobs: int

    def as_dict(self) -> dict[str, Any]:
        """The row as the API and the CSV give it: the period as its first day."""
        values = {column: getattr(self, column) for column in CSV_COLUMNS}
        values["period"] = self.period.date().isoformat()
        return values


@dataclass(frozen=True)
class TeamTotal:
    team: str
    flavor: str
    gpu_hours: float
    preempted_gpu_hours: float
    used_gpu_hours: float | None
    idle_gpu_hours: float
    guarantee_gpus: int | None
    guarantee_gpu_hours: float | None  # the guarantee held all through the window
    fair_share_gpus: int | None
    fair_share_gpu_hours: float | None  # the last cycle's fair share, held all through

    @property
    def of_guarantee(self) -> float | None:
        if not self.guarantee_gpu_hours:
            return None
        return 100 * self.gpu_hours / self.guarantee_gpu_hours

    @property
    def of_fair_share(self) -> float | None:
        if not self.fair_share_gpu_hours:
            return None
        return 100 * self.gpu_hours / self.fair_share_gpu_hours

    def as_dict(self) -> dict[str, Any]:
        return {
            **{f: getattr(self, f) for f in self.__dataclass_fields__},
            "percent_of_guarantee": self.of_guarantee,
            "percent_of_fair_share": self.of_fair_share,
        }


@dataclass(frozen=True)
class UsageReport:
    since: datetime
    until: datetime
    by: str
    rows: list[UsageRow]
    teams: list[TeamTotal]
    top_users: list[dict[str, Any]]

    @property
    def gpu_hours(self) -> float:
        return sum(r.gpu_hours for r in self.rows)

    @property
    def preempted_gpu_hours(self) -> float:
        return sum(r.preempted_gpu_hours for r in self.rows)


def _sums() -> dict[str, Any]:
    return {
        "s": Sum("gpu_seconds"),
        "lost": Sum("gpu_seconds", filter=Q(outcome=UsageOutcome.PREEMPTED)),
        "used": Sum("used_gpu_seconds"),
        "idle": Sum("idle_gpu_seconds"),
    }


def _hours(sums: dict[str, Any]) -> tuple[float, float, float | None, float]:
    """_sums()'s seconds as GPU-hours: held, lost to preemption, used (None where no
    utilization is known) and idle."""
    used = sums["used"]
    return (
        (sums["s"] or 0) / 3600,
        (sums["lost"] or 0) / 3600,
        None if used is None else used / 3600,
        (sums["idle"] or 0) / 3600,
    )


def filtered(viewer: Any, filters: dict[str, Any]) -> QuerySet[UsageRecord]:
    """The viewer's visible rows within the window (whole hours from `since`) and filters."""
    rows = visible_usage(viewer).filter(
        hour__gte=hour_of(filters["since"]), hour__lt=filters["until"]
    )
    if filters.get("team"):
        rows = rows.filter(team__slug=filters["team"])
    if filters.get("user"):
        rows = rows.filter(user__username=filters["user"])
    if filters.get("flavor"):
        rows = rows.filter(flavor__name=filters["flavor"])
    return rows


def usage_report(viewer: Any, filters: dict[str, Any]) -> UsageReport:
    """The report for cleaned `UsageFilterForm` data: per period, team, user and flavor; per
    team and flavor against guarantee and fair share (admins only); the top users."""
    rows = filtered(viewer, filters)
    trunc = PERIODS[filters["by"]]("hour", tzinfo=UTC)
    grouped = (
        rows.annotate(period=trunc)
        .values("period", "team__slug", "user__username", "flavor__name")
        .annotate(**_sums(), jobs=Count("job_id", distinct=True))
        .order_by("period", "team__slug", "user__username", "flavor__name")
    )
    table = [
        UsageRow(
            g["period"],
            g["team__slug"],
            g["user__username"],
            g["flavor__name"],
            *_hours(g),
            g["jobs"],
        )
        for g in grouped
    ]
    teams = []
    if may_see_teams(viewer):
        # Only whole teams stand against their quotas: not a team where the viewer is a member
        # and so sees their own rows only.
        administered = rows if viewer.is_superuser else rows.filter(team_id__in=_admin_of(viewer))
        teams = _team_totals(administered, filters)
    top = [
        {"user": u["user__username"], "team": u["team__slug"], "gpu_hours": u["s"] / 3600}
        for u in rows.values("user__username", "team__slug")
        .annotate(s=Sum("gpu_seconds"))
        .order_by("-s", "user__username")[:TOP_USERS]
    ]
    return UsageReport(filters["since"], filters["until"], filters["by"], table, teams, top)


def _team_totals(rows: QuerySet[UsageRecord], filters: dict[str, Any]) -> list[TeamTotal]:
    hours = (filters["until"] - filters["since"]).total_seconds() / 3600
    quotas = {(q.team_id, q.flavor_id): q.guarantee for q in Quota.objects.all()}
    shares = {(s.team_id, s.flavor_id): s.gpus for s in FairShare.objects.all()}
    totals = []
    for g in (
        rows.values("team_id", "flavor_id", "team__slug", "flavor__name")
        .annotate(**_sums())
        .order_by("team__slug", "flavor__name")
    ):
        key = (g["team_id"], g["flavor_id"])
        guarantee, share = quotas.get(key), shares.get(key)
        totals.append(
            TeamTotal(
                g["team__slug"],
                g["flavor__name"],
                *_hours(g),
                guarantee_gpus=guarantee,
                guarantee_gpu_hours=None if guarantee is None else guarantee * hours,
                fair_share_gpus=share,
                fair_share_gpu_hours=None if share is None else share * hours,
            )
        )
    return totals


def csv_lines(report: UsageReport) -> list[list[Any]]:
    """The CSV export: a header and one line per period, team, user and flavor."""
    lines: list[list[Any]] = [list(CSV_COLUMNS)]
    for row in report.rows:
        lines.append([as_csv_cell(v) for v in row.as_dict().values()])
    return lines


@dataclass(frozen=True)
class IdleHours:
    team: str
    flavor: str
    held_gpu_hours: float
    used_gpu_hours: float | None
    idle_gpu_hours: float
    idle_jobs_now: int


def idle_hours_by_team(since: datetime) -> list[IdleHours]:
    """Per team and flavor since `since`: GPU-hours held, used and held below the idle
    threshold (where utilization is known), and the running jobs flagged idle now."""
    flagged: dict[tuple[str, str], int] = {
        (r["job__team__slug"], r["job__flavor__name"]): r["n"]
        for r in JobActivity.objects.filter(idle=True, job__state=JobState.RUNNING)
        .values("job__team__slug", "job__flavor__name")
        .annotate(n=Count("job_id"))
        .order_by()
    }
    out = []
    for g in (
        UsageRecord.objects.filter(hour__gte=hour_of(since))
        .values("team__slug", "flavor__name")
        .annotate(**_sums())
        .order_by("team__slug", "flavor__name")
    ):
        key = (g["team__slug"], g["flavor__name"])
        held, _, used, idle = _hours(g)
        out.append(IdleHours(*key, held, used, idle, idle_jobs_now=flagged.get(key, 0)))
    return out
