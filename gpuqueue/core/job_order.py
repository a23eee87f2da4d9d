"""How a job list may be sorted: one vocabulary for the dashboard's column headers and the
API's `?ordering=`, each key a database expression (so that the database sorts and pages,
never Python), with the job's id as the tie-breaker in the same direction.

Derived keys (waited, ran, GPU-hours) read "now" as a parameter rather than the database's
clock: a cursor carries the instant its first page was read, so that the pages of one
traversal sort by the same numbers however long the reader takes between them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import (
    Case,
    DateTimeField,
    F,
    FloatField,
    Func,
    IntegerField,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.expressions import BaseExpression
from django.db.models.functions import Cast, Coalesce

from gpuqueue.core.states import JobState

# The annotation a sorted queryset carries: its key for each row (the cursor's position).
SORT_KEY = "sort_key"
# A pending job not ranked yet sorts after every ranked one.
UNRANKED = 2**31 - 1


class Epoch(Func):
    """Seconds of an interval, as a double (EXTRACT gives numeric since PostgreSQL 14)."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)"
    output_field = FloatField()


def _seconds(later: Any, earlier: Any) -> BaseExpression:
    return Cast(Epoch(later - earlier), FloatField())


def _at(now: datetime) -> Value:
    return Value(now, output_field=DateTimeField())


def _waited(now: datetime) -> BaseExpression:
    # As dashboard.job_times.waited_seconds: from submission to the first start, or so far.
    until = Coalesce("admitted_at", "started_at", "finished_at", _at(now))
    return _seconds(until, F("submitted_at"))


def _ran(now: datetime) -> BaseExpression:
    # As job_times.elapsed_seconds; a job that has not started ran 0 s (a key is never NULL,
    # so that one comparison pages through every row).
    ran = _seconds(Coalesce("finished_at", _at(now)), Coalesce("started_at", "admitted_at"))
    return Coalesce(ran, Value(0.0), output_field=FloatField())


def _gpu_seconds(now: datetime) -> BaseExpression:
    return (F("workers") * F("gpus_per_worker")) * _ran(now)


@dataclass(frozen=True)
class SortKey:
    expression: Callable[[datetime], Any]
    kind: type  # of the key's values: how a cursor writes and reads a position
    label: str


SORT_KEYS: dict[str, SortKey] = {
    "id": SortKey(lambda now: F("id"), int, "#"),
    "name": SortKey(lambda now: F("name"), str, "name"),
    "team": SortKey(lambda now: F("team__slug"), str, "team"),
    "user": SortKey(lambda now: F("user__username"), str, "user"),
    "flavor": SortKey(lambda now: F("flavor__name"), str, "flavor"),
    "gpus": SortKey(
        lambda now: F("workers") * F("gpus_per_worker"), int, "GPUs (workers × GPUs each)"
    ),
    "state": SortKey(lambda now: F("state"), str, "state"),
    "priority": SortKey(lambda now: F("priority"), int, "priority"),
    "position": SortKey(
        lambda now: Coalesce(
            Case(When(state=JobState.PENDING, then="standing__cluster_position")),
            Value(UNRANKED),
            output_field=IntegerField(),
        ),
        int,
        "place in the cluster's queue",
    ),
    "submitted_at": SortKey(lambda now: F("submitted_at"), datetime, "submission time"),
    "waited": SortKey(_waited, float, "time waited (so far)"),
    "ran": SortKey(_ran, float, "time run"),
    "gpu_hours": SortKey(_gpu_seconds, float, "GPU-hours"),
}


class UnknownOrdering(ValueError):
    pass


def unknown_ordering_message(value: str) -> str:
    return (
        f"Unknown ordering {value!r}: one of {', '.join(SORT_KEYS)}, "
        "with a leading '-' for descending."
    )


@dataclass(frozen=True)
class Ordering:
    key: str
    descending: bool

    @classmethod
    def parse(cls, value: str) -> Ordering:
        """`name`, `-waited`, `GPU_HOURS` (any case); anything else raises UnknownOrdering."""
        text = value.strip()
        descending = text.startswith("-")
        key = text.lstrip("-").lower()
        if key not in SORT_KEYS or text.count("-") > 1:
            raise UnknownOrdering(unknown_ordering_message(value))
        return cls(key, descending)

    def __str__(self) -> str:
        return f"-{self.key}" if self.descending else self.key

    @property
    def reversed(self) -> Ordering:
        return Ordering(self.key, not self.descending)

    @property
    def sort_key(self) -> SortKey:
        return SORT_KEYS[self.key]

    def apply(self, jobs: QuerySet[Any], now: datetime) -> QuerySet[Any]:
        """Sorted by the key, then by id in the same direction (a composite index such as
        job_recent (-submitted_at, -id) serves both ways)."""
        if self.key == "id":
            jobs = jobs.annotate(**{SORT_KEY: F("id")})
        else:
            jobs = jobs.annotate(**{SORT_KEY: self.sort_key.expression(now)})
        if self.descending:
            return jobs.order_by(F(SORT_KEY).desc(), "-id")
        return jobs.order_by(F(SORT_KEY).asc(), "id")

    def page(
        self,
        jobs: QuerySet[Any],
        now: datetime,
        start: int,
        stop: int,
        after: tuple[Any, int] | None = None,
    ) -> QuerySet[Any]:
        """Rows [start, stop) of `jobs` in this ordering (after a cursor's (position, id) if
        given). The database sorts (key, id) pairs alone and reads only the page's rows whole:
        a key without an index sorts every visible row, and carrying whole rows (and their
        joins) through that sort costs several times more than the pairs."""
        inner = self.apply(jobs, now)
        if after is not None:
            inner = self.after(inner, *after)
        ids = inner.values("pk")[start:stop]
        return self.apply(jobs.filter(pk__in=ids), now)

    def after(self, jobs: QuerySet[Any], position: Any, job_id: int) -> QuerySet[Any]:
        """The rows that come after (position, job_id) in this ordering. The first condition
        repeats the key alone so that an index on it can bound the scan."""
        more = "lt" if self.descending else "gt"
        at_most = "lte" if self.descending else "gte"
        return jobs.filter(
            Q(**{f"{SORT_KEY}__{at_most}": position}),
            Q(**{f"{SORT_KEY}__{more}": position}) | Q(**{f"id__{more}": job_id}),
        )


DEFAULT = Ordering("submitted_at", descending=True)
