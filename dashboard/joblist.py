"""Reads behind the jobs pages: the filtered list, the live counters, a job's page."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, QuerySet
from django.http import QueryDict
from django.utils import timezone

from gpuqueue.core.array_schedule import throttle_sentence
from gpuqueue.core.job_order import DEFAULT, Ordering, UnknownOrdering
from gpuqueue.core.states import (
    ACTIVE,
    FINAL,
    JobState,
    states_named,
    unknown_state_message,
)
from gpuqueue.models import Job, JobHold
from gpuqueue.services.jobs.array_rows import ArraySummary, array_summaries, one_row_per_array

PAGE_SIZE = 50
# An expanded array shows at most this many of its tasks; its page has every one.
TASKS_SHOWN = 100
# At most this many arrays expanded at once (`?expand=7,9`).
MAX_EXPANDED = 20
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
    expand: frozenset[int] = frozenset()  # arrays shown with their tasks (`?expand=7,9`)

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
        expand = frozenset(
            int(part)
            for part in params.get("expand", "")[:200].split(",")[:MAX_EXPANDED]
            if part.strip().isdigit() and len(part.strip()) < 19
        )
        return cls(
            expand=expand,
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

    def query(
        self,
        page: int | None = None,
        ordering: str | None = None,
        expand: frozenset[int] | None = None,
    ) -> str:
        """The filter and sort as a query string (for links to other pages of the same list,
        or with `ordering`, to the first page of another sort; `expand`: other arrays
        expanded)."""
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
        expanded = self.expand if expand is None else expand
        if expanded:
            params["expand"] = ",".join(str(i) for i in sorted(expanded))
        return params.urlencode(safe=",")

    def toggled(self, array_id: int) -> str:
        """This page's query with `array_id` expanded, or collapsed when it was."""
        return self.query(self.page, expand=self.expand ^ {array_id})

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
class TaskNote:
    """A task held by its array's limit: when it should start and why then."""

    sentence: str
    start: Any  # datetime | None


@dataclass(frozen=True)
class JobPage:
    jobs: list[Job]
    page: int
    has_next: bool
    arrays: dict[int, ArraySummary] = field(default_factory=dict)  # the rows that are arrays
    tasks: dict[int, list[Job]] = field(default_factory=dict)  # expanded arrays' tasks
    notes: dict[int, TaskNote] = field(default_factory=dict)  # by job id

    @property
    def live(self) -> bool:
        """Whether a row can still change; once none can, polling stops (HTTP 286)."""
        return any(job.state not in FINAL for job in self.jobs) or any(
            summary.unfinished for summary in self.arrays.values()
        )


def job_page(user: Any, job_filter: JobFilter) -> JobPage:
    """One page of the visible jobs in the filter's order (newest first by default), sorted
    by the database. No COUNT(*): one extra row says whether a further page exists, which
    keeps the page fast with 100,000 jobs."""
    visible = job_filter.apply(Job.objects.visible_to(user), user)
    offset = (job_filter.page - 1) * PAGE_SIZE
    jobs = (
        one_row_per_array(visible)
        .select_related("team", "flavor", "user", "source", "standing")
        .defer(*DEFERRED)
    )
    stop = offset + PAGE_SIZE + 1
    now = timezone.now()
    rows = list(job_filter.ordering.page(jobs, now, offset, stop))[: PAGE_SIZE + 1]
    shown = rows[:PAGE_SIZE]
    arrays = array_summaries({j.array_id for j in shown if j.array_id is not None}, now)
    tasks: dict[int, list[Job]] = {}
    notes: dict[int, TaskNote] = {}
    for array_id in job_filter.expand & arrays.keys():
        tasks[array_id] = list(
            Job.objects.filter(array_id=array_id)
            .select_related("team", "flavor", "user", "standing")
            .defer(*DEFERRED)
            .order_by("array_index")[:TASKS_SHOWN]
        )
        notes.update(task_notes(arrays[array_id], tasks[array_id]))
    return JobPage(shown, job_filter.page, len(rows) > PAGE_SIZE, arrays, tasks, notes)


DEFERRED = ("env", "labels", "annotations", "command", "checkpoint_token_hash")


def task_notes(summary: ArraySummary, tasks: list[Job]) -> dict[int, TaskNote]:
    """For the tasks held by the array's limit: the sentence and the start it reckons."""
    notes = {}
    limit = summary.limit
    for job in tasks:
        seen = summary.outlook.tasks.get(job.array_index)  # type: ignore[arg-type]
        if seen is None or job.hold != JobHold.ARRAY_LIMIT or limit is None:
            continue
        sentence = throttle_sentence(job.array_index or 0, summary.array.size, limit, seen.after)
        notes[job.pk] = TaskNote(sentence, seen.start)
    return notes


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


def held_task_note(job: Job) -> TaskNote | None:
    """For a task its array's limit holds back: when it should start and why then."""
    if job.hold != JobHold.ARRAY_LIMIT or job.array_id is None or job.state != "PENDING":
        return None
    summary = array_summaries([job.array_id], timezone.now()).get(job.array_id)
    return None if summary is None else task_notes(summary, [job]).get(job.pk)
