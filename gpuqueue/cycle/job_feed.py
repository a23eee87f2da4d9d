"""The active jobs (pending, admitted, running, preempting) as the cycle last read them,
brought up to date from what changed since: the change feed of migration 0016.

With 43,000 jobs waiting and nothing changed, reading every row (even only every row's version)
would be most of a steady cycle. Each job row carries `changed_xact`, the 64-bit id of the
transaction that last changed a column the feed reads, set by a trigger (migrations 0021, 0023,
0024 and 0025) that watches `WATCHED`: writes of what only people read (forecasts, estimated
starts) leave it alone, whoever makes them. What the cycle keeps itself (`SHOWN`: reasons and
positions) lives in the jobs' `Standing` rows, which the read joins and no trigger watches.
A read records its statement's snapshot (`pg_current_snapshot()`) and its own transaction's
id; the next read asks only for rows whose `changed_xact` that snapshot did not
see as committed, or that its own transaction wrote (after the read, too: the admissions). A
deleted row leaves no trace, so each read also counts the active jobs in the same statement: a
count that differs from what is kept means a full read. A write of a `Standing` alone by
anyone but the cycle (the hold phase's reason on a job it holds back, which the cycle does not
plan; an edit by hand) reaches the kept read at the next whole read.

A read is kept once its transaction commits (one that rolls back leaves the last committed
read, from which the next read starts again), for at most ten minutes; GPUQUEUE_CACHES off
reads everything every time (the plain path the tests compare with). The reasons and
positions the cycle writes itself are remembered with it (`remember_shown`), so that the next
cycle compares its plan with what the rows show without reading them again.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any, NamedTuple

from django.db import connection, transaction

from gpuqueue.core import caches
from gpuqueue.core.states import ACTIVE, JobState
from gpuqueue.models import Job, Standing
from gpuqueue.scheduler.model import ReasonCode

# What the cycle last wrote on a pending job: (pending_reason, queue_position, cluster_position).
StoredPending = tuple[Any, int | None, int | None]


class Row(NamedTuple):
    """One row of the feed's statement: the statement's own columns (its snapshot, its
    transaction's id, the count of active jobs: the same on every row), then one job's
    columns, all None on the one row of a read that found no job. Times are epoch seconds,
    `placement` and `pending_reason` text. Built by psycopg as it reads (`_row_maker`)."""

    snapshot: str
    own: int
    active: int
    id: int
    state: str
    team_id: int
    user_id: int
    flavor_id: int
    workers: int
    gpus_per_worker: int
    placement: str | None
    priority: int
    preemptible: bool
    submitted_at: float
    admitted_at: float | None
    max_runtime_seconds: int | None
    expected_runtime_seconds: int | None
    checkpoint_requested_at: float | None
    not_before: float | None
    hold: str
    attempts: int
    pending_reason: str | None
    queue_position: int | None
    cluster_position: int | None
    checkpoint_grace_seconds: int
    preempted_for: int | None
    cpu_millicores: int | None  # per worker; None: the flavor's per GPU
    memory_mib: int | None
    gpu_milli: int  # 0: whole GPUs
    gpu_models: list[str]
    gpu_devices: str  # JSON text: [[node, GPU index], ...]
    topology_level: str  # "": none
    topology_required: bool
    requeued_at: float | None
    pod_sets: str | None  # JSON text (core/pod_sets.py); None: every pod alike
    pod_nodes: str | None  # JSON text: each pod's node, with pod_sets once admitted


_COLUMNS = Row._fields[Row._fields.index("id") :]  # the job's, selected in this order
TIMES = {"submitted_at", "admitted_at", "checkpoint_requested_at", "not_before", "requeued_at"}
AS_TEXT = {"placement", "pending_reason", "gpu_devices", "pod_sets", "pod_nodes"}
# What the cycle writes on pending jobs' `Standing` rows and remembers itself
# (`remember_shown`): a write of these does not mark the job's row.
SHOWN = ("pending_reason", "queue_position", "cluster_position")
STANDING = dict(zip(SHOWN, ("reason", "queue_position", "cluster_position"), strict=True))
# The reason of a job waiting on victims' GPUs (`Active.awaiting`).
AWAITING = ReasonCode.WAITING_FOR_PREEMPTION.value
# The columns whose change marks a row for the feed: the trigger's WHEN clause lists the
# same (tests/cycle/test_snapshot.py compares them with the trigger as installed).
WATCHED = tuple(c for c in _COLUMNS if c != "id" and c not in SHOWN)


def _row_maker(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    """psycopg's row factory for the feed's statement, asked once per statement: its columns
    must be `Row`'s, by name and in order. Each row is then made a `Row` straight from the
    tuple psycopg read (`tuple.__new__` through `partial`: no Python frame per row, and a
    full read is up to 100,000 rows)."""
    names = tuple(column.name for column in cursor.description or ())
    if names != Row._fields:
        raise RuntimeError(f"the feed's statement selects {names}, not {Row._fields}")
    return partial(tuple.__new__, Row)


@dataclass
class Active:
    """Every active job's row by id, and what the read saw (its snapshot, its transaction)."""

    rows: dict[int, Row]
    snapshot: str
    own: int
    shown: dict[int, StoredPending] = field(default_factory=dict)  # decoded, pending rows only
    # Those of `shown` whose reason is AWAITING (the snapshot's victims claimed by the job
    # waiting on them, cycle/snapshot.py): kept with `shown`, so that a cycle reads a few
    # reasons, not every pending job's.
    awaiting: set[int] = field(default_factory=set)
    # The engine's reason each of those shows, where this process wrote it or found it equal
    # (`remember_shown`): the next cycle compares its reasons with these, not their JSON.
    # Dropped with the row's `shown` (the same freshness: a changed row, a whole read).
    reasons: dict[int, Any] = field(default_factory=dict)
    # The engine's object of each row, made by the snapshot (cycle/snapshot.py) under the
    # names (and minimum runtime) in `names`, kept while its row is: the predictions know a
    # job by its object.
    objects: dict[int, Any] = field(default_factory=dict)
    names: Any = None
    full: bool = True  # read whole (a cold start, a count that differed)
    read: int = 0  # job rows the statement returned
    full_at: float = 0.0  # when the last whole read was made (monotonic)
    # The same as the last read's when this one read nothing, else new (in this process):
    # whoever read last (the cycle, a forecast), equal marks mean no job changed between.
    mark: int = 0


# Everything is read whole again after this long, a bound on anything written behind the
# feed's back (by hand: reasons or positions, a trigger turned off).
FULL_READ_SECONDS = caches.CYCLE_MAX_AGE_SECONDS
_kept: caches.Kept[str, Active] = caches.Kept(max_entries=None, max_age_seconds=FULL_READ_SECONDS)
_KEY = "active jobs"
_VERSION = 1  # one value, kept under a fixed version: its freshness is the feed's own
_reading: list[Active] = []  # the read of the transaction in progress (remember_shown)
_marks = itertools.count(1)


def read_active() -> Active:
    """Every active job, in one statement: all of them, or the last committed read updated
    with what changed since."""
    last = _kept.get(_KEY, _VERSION)
    now = caches.time.monotonic()
    if last is not None and now - last.full_at > FULL_READ_SECONDS:
        last = None
    with connection.cursor() as cursor:
        cursor.cursor.row_factory = _row_maker
        if last is None:
            cursor.execute(_read_sql(changes=False), [sorted(ACTIVE), sorted(ACTIVE)])
        else:
            cursor.execute(
                _read_sql(changes=True),
                [
                    sorted(ACTIVE),
                    min(_snapshot_xmin(last.snapshot), last.own),
                    last.own,
                    last.snapshot,
                ],
            )
        rows: list[Row] = cursor.fetchall()
    snapshot, own, count = rows[0].snapshot, rows[0].own, rows[0].active
    changed = [row for row in rows if row.id is not None]
    if last is None:
        active = Active({row.id: row for row in changed}, snapshot, int(own), full_at=now)
        _decode_shown(active, active.rows.values())
    else:
        active = Active(
            dict(last.rows),
            snapshot,
            int(own),
            dict(last.shown),
            set(last.awaiting),
            dict(last.reasons),
            dict(last.objects),
            last.names,
            full=False,
            full_at=last.full_at,
        )
        for row in changed:
            active.shown.pop(row.id, None)
            active.awaiting.discard(row.id)
            active.reasons.pop(row.id, None)
            active.objects.pop(row.id, None)
            if row.state in ACTIVE:
                active.rows[row.id] = row
            else:
                active.rows.pop(row.id, None)
        _decode_shown(active, (row for row in changed if row.state in ACTIVE))
        if len(active.rows) != count:  # a row deleted: start over
            _kept.clear()
            return read_active()
    active.read = len(changed)
    active.mark = last.mark if last is not None and not changed else next(_marks)
    _reading[:] = [active]
    transaction.on_commit(lambda: _keep(active))
    return active


def _keep(active: Active) -> None:
    _kept.put(_KEY, _VERSION, active)
    if _reading and _reading[0] is active:
        _reading.clear()


def _decode_shown(active: Active, rows: Iterable[Row]) -> None:
    """What each pending row shows, with a reason's JSON decoded once however many share it."""
    decoded: dict[str | None, Any] = {None: None}
    for row in rows:
        if row.state != JobState.PENDING:
            continue
        reason = row.pending_reason
        if reason not in decoded:
            decoded[reason] = json.loads(reason)
        active.shown[row.id] = (decoded[reason], row.queue_position, row.cluster_position)
        _index(active.awaiting, row.id, decoded[reason])


def _index(awaiting: set[int], job_id: int, reason: Any) -> None:
    if isinstance(reason, Mapping) and reason.get("code") == AWAITING:
        awaiting.add(job_id)
    else:
        awaiting.discard(job_id)


def current_read() -> Active | None:
    """The read of the transaction in progress, if it made one and has not committed."""
    return _reading[0] if _reading else None


def remember_shown(
    written: list[tuple[int, Any, int | None, int | None]],
    reasons: Mapping[int, Any] | None = None,
) -> None:
    """The cycle wrote these (id, reason, team position, cluster position) on pending jobs'
    `Standing` rows, which mark nothing: once that commits, the kept read shows them
    (the next cycle compares its plan with them without reading the rows). `reasons`: the
    engine's reason each row now shows, for rows written or found to show it already; a row
    written without one has none kept."""
    reasons = reasons or {}

    def remember() -> None:
        active = _kept.get(_KEY, _VERSION)
        if active is None:
            return
        shown, kept = active.shown, active.reasons
        for job_id, *values in written:
            if job_id in shown:
                shown[job_id] = tuple(values)  # type: ignore[assignment]
                _index(active.awaiting, job_id, values[0])
            kept.pop(job_id, None)
        kept.update((i, reason) for i, reason in reasons.items() if i in shown)

    transaction.on_commit(remember)


def _snapshot_xmin(snapshot: str) -> int:
    return int(snapshot.split(":", 1)[0])  # xmin:xmax:xip,…


@cache
def _read_sql(changes: bool) -> str:
    """One row per active job (or per changed job), each beginning with the statement's
    snapshot, its transaction's id and the count of active jobs; one row of those alone
    (the job's columns null) when no job is read."""
    quote = connection.ops.quote_name
    table = quote(Job._meta.db_table)
    state = quote("state")

    def column(name: str) -> str:
        if name in SHOWN:  # the job's `Standing`, null without one
            sql = f"s.{quote(Standing._meta.get_field(STANDING[name]).column)}"
        else:
            sql = f"j.{quote(Job._meta.get_field(name).column)}"
        if name in TIMES:
            sql = f"EXTRACT(EPOCH FROM {sql})::float8"
        elif name in AS_TEXT:
            sql = f"{sql}::text"
        return f"{sql} AS {quote(name)}"

    columns = ", ".join(column(name) for name in _COLUMNS)
    if changes:
        where = (
            "j.changed_xact >= %s AND (j.changed_xact = %s OR NOT "
            "pg_visible_in_snapshot(j.changed_xact::text::xid8, %s::pg_snapshot))"
        )
    else:
        where = f"j.{state} = ANY(%s)"
    return (
        "SELECT s.snapshot, s.own, s.active, c.* FROM (SELECT pg_current_snapshot()::text "
        "AS snapshot, pg_current_xact_id()::text::bigint AS own, "
        f"(SELECT count(*) FROM {table} WHERE {state} = ANY(%s)) AS active) s "
        f"LEFT JOIN (SELECT {columns} FROM {table} j LEFT JOIN "
        f"{quote(Standing._meta.db_table)} s ON s.job_id = j.id WHERE {where} "
        # In id order, as the rows are made and then walked (cycle/snapshot.py): a hash join
        # returns them scattered, and the kept rows, made in that order, cost every later
        # cycle's walk over them twice the time in memory reads.
        "ORDER BY j.id) c ON true"
    )
