"""Reads behind the jobs pages: the filtered list, the live counters, a job's page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, QuerySet
from django.http import QueryDict
from django.utils import timezone

from gpuqueue.core.job_order import DEFAULT, Ordering, UnknownOrdering
from gpuqueue.core.states import (
    ACTIVE,
    FINAL,
    JobState,
    states_named,
    unknown_state_message,
)
from gpuqueue.models import Job

PAGE_SIZE = 50
STATE_LABELS = [
    ("", "any state"),
    ("active", "active (pending or holding GPUs)"),
    ("pending", "pending"),
    ("holding", "admitted, running or preempting"),
    ("running", "running"),
    ("finished", "finished"),
    ("succeeded", "succeeded"),
    ("failed", "failed"),
    ("cancelled", "cancelled"),
]


@dataclass(frozen=True)
class JobFilter:
    team: str = ""
    flavor: str = ""
    state: str = ""
    mine: bool = False
    q: str = ""
    page: int = 1
    problem: str = ""  # a value the filter could not use, said to the user
    ordering: Ordering = DEFAULT  # the API's `?ordering=`, the same keys
    sort_problem: str = ""

    @classmethod
    def parse(cls, params: QueryDict) -> JobFilter:
        """A state in any case; an unknown state is shown as a problem (`problem`) and the
        list is not filtered by it. Other malformed values are ignored: a filter is a view."""
        state = params.get("state", "").strip()
        known = states_named(state) is not None
        try:
            page = max(1, min(int(params.get("page", "1")), 10_000))
        except ValueError:
            page = 1
        ordering, sort_problem = DEFAULT, ""
        if params.get("ordering", "").strip():
            try:
                ordering = Ordering.parse(params["ordering"][:63])
            except UnknownOrdering as exc:
                sort_problem = str(exc)
        return cls(
            ordering=ordering,
            sort_problem=sort_problem,
            team=params.get("team", "")[:63],
            flavor=params.get("flavor", "")[:63],
            state=state.lower() if known else "",
            problem=unknown_state_message(state) if state and not known else "",
            mine=params.get("mine") == "1",
            q=params.get("q", "").strip()[:63],
            page=page,
        )

    def query(self, page: int | None = None, ordering: str | None = None) -> str:
        """The filter and sort as a query string (for links to other pages of the same list,
        or with `ordering`, to the first page of another sort)."""
        params = QueryDict(mutable=True)
        for key in ("team", "flavor", "state", "q"):
            if getattr(self, key):
                params[key] = getattr(self, key)
        if self.mine:
            params["mine"] = "1"
        wanted = ordering if ordering is not None else str(self.ordering)
        if wanted != str(DEFAULT):
            params["ordering"] = wanted
        if page is not None and page > 1:
            params["page"] = str(page)
        return params.urlencode()

    def apply(self, jobs: QuerySet[Job], user: Any) -> QuerySet[Job]:
        if self.team:
            jobs = jobs.filter(team__slug=self.team)
        if self.flavor:
            jobs = jobs.filter(flavor__name=self.flavor)
        if self.state:
            jobs = jobs.filter(state__in=states_named(self.state) or ())
        if self.mine:
            jobs = jobs.filter(user=user)
        if self.q:
            jobs = jobs.filter(name__icontains=self.q)
        return jobs


@dataclass(frozen=True)
class JobPage:
    jobs: list[Job]
    page: int
    has_next: bool

    @property
    def live(self) -> bool:
        """Whether a row can still change; once none can, polling stops (HTTP 286)."""
        return any(job.state not in FINAL for job in self.jobs)


def job_page(user: Any, job_filter: JobFilter) -> JobPage:
    """One page of the visible jobs in the filter's order (newest first by default), sorted
    by the database. No COUNT(*): one extra row says whether a further page exists, which
    keeps the page fast with 100,000 jobs."""
    jobs = job_filter.apply(Job.objects.visible_to(user), user)
    offset = (job_filter.page - 1) * PAGE_SIZE
    jobs = jobs.select_related("team", "flavor", "user", "source").defer(
        "env", "labels", "annotations", "command", "checkpoint_token_hash"
    )
    stop = offset + PAGE_SIZE + 1
    rows = list(job_filter.ordering.page(jobs, timezone.now(), offset, stop))
    return JobPage(rows[:PAGE_SIZE], job_filter.page, len(rows) > PAGE_SIZE)


def active_counts(user: Any) -> dict[str, int]:
    """Jobs of the user's teams per active state (the counters in the header); final states
    are not counted, so the query stays on the partial index of active jobs."""
    if not getattr(user, "is_authenticated", False):
        return {}
    rows = (
        Job.objects.visible_to(user)
        .filter(state__in=[s.value for s in ACTIVE])
        .values("state")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts = {row["state"]: row["n"] for row in rows}
    return {s.value: counts.get(s.value, 0) for s in JobState if s in ACTIVE}
