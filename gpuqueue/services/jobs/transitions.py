"""The one door for a job's state: every move of the state machine, of one job or of thousands,
goes through this module, which writes the rows, their events and their GPU-hours ledger rows
in one statement (tests/foundation/test_one_door.py fails if another module writes `state`):
`move_jobs` for jobs the caller read (the cycle's admissions, the hold phase's cancels, and
`transition` for one job), `move_selected` for a selection it need not read (an array's
tasks).

New jobs are created PENDING with their submission event (services/jobs/submit.py, arrays.py);
from then on only this module changes their state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from gpuqueue.core.states import TRANSITIONS, JobState, check_transition
from gpuqueue.models import Job, JobEvent, Standing, gpu_share
from gpuqueue.services.accounting.usage_ledger import (
    ATTEMPT_COLUMNS,
    gpu_share_sql,
    opened_rows_sql,
    released_rows_sql,
    releases,
    starts,
)
from gpuqueue.services.jobs.column_arrays import array_param, array_sql
from gpuqueue.services.jobs.pending import SHOWN_WHILE_PENDING


class Move(NamedTuple):
    """One job to move: its id, the state the caller read it in (`seen`), and what is its own:
    field values (every move of a batch names the same fields), its event's reason and
    details (None: the batch's). A tuple: a wave builds thousands, cheaply."""

    job_id: int
    seen: str
    changes: Mapping[str, Any] = MappingProxyType({})
    reason: str | None = None
    details: Mapping[str, Any] | None = None


def move_jobs(
    moves: Sequence[Move],
    to: JobState,
    *,
    reason: str,
    actor: str,
    details: Mapping[str, Any] | None = None,
    changes: Mapping[str, Any] | None = None,
    counted: tuple[str, ...] = (),
) -> list[int]:
    """Move each job still in the state its caller saw to `to`; returns the ids moved, in the
    order given. A job that another process moved meanwhile is skipped: no row, no event.

    1. Check every move against the state machine: one forbidden move raises InvalidTransition
       and nothing is written.
    2. One statement (`_execute`): lock the rows still in their seen state (in id order),
       update them (each move's `changes`, the batch's `changes`, `counted` fields + 1), insert
       an event per moved row, and the ledger rows of each attempt the move starts (its open
       row) or ends (its final rows, up to the event's time).

    Runs in the caller's transaction, if any: the statement is atomic by itself.
    """
    if not moves:
        return []
    to = JobState(to)
    _check(moves, to)
    common = dict(changes or {})
    own = list(moves[0].changes)
    _check_fields(moves, own, common, counted)
    job_field = Job._meta.get_field
    # Per row: id, seen state, its own fields, and its reason and details when any move has them.
    per_row: list[tuple[str, Any, list[Any]]] = [
        ("id", job_field("id"), [m.job_id for m in moves]),
        ("seen", job_field("state"), [str(m.seen) for m in moves]),
        *((f"c_{name}", job_field(name), [m.changes[name] for m in moves]) for name in own),
    ]
    if any(m.reason is not None for m in moves):
        per_row.append(("reason", JobEvent._meta.get_field("reason"), [m.reason for m in moves]))
    if any(m.details is not None for m in moves):
        per_row.append(
            (
                "details",
                JobEvent._meta.get_field("details"),
                [None if m.details is None else dict(m.details) for m in moves],
            )
        )
    names = [name for name, _, _ in per_row]
    # Every move locks its rows first, in id order, as `move_selected` does: two moves of
    # overlapping jobs (an admission wave, an array's cancel) then wait for each other instead
    # of each holding a row the other needs. A row changed meanwhile is read again once locked
    # and skipped when it left its seen state, so a move that ends attempts closes the attempt
    # it ends.
    lock = "ORDER BY j.id FOR NO KEY UPDATE OF j"
    quote = connection.ops.quote_name
    column = {f.name: quote(f.column) for f in Job._meta.concrete_fields}
    head = f"""
    v AS (
        SELECT * FROM unnest({", ".join(array_sql(f) for _, f, _ in per_row)})
        AS v ({", ".join(names)})
    ),
    target AS (
        SELECT {", ".join(f"j.{column[c]} AS {name}" for name, c in TARGET_COLUMNS[:-2])},
               j.{column["workers"]} * j.{column["gpus_per_worker"]} AS gpus,
               {_share_sql("j", column)} AS gpu_share
        FROM {quote(Job._meta.db_table)} j JOIN v ON j.id = v.id AND j.{column["state"]} = v.seen
        {lock}
    )"""
    moved, _ = _execute(
        (head, [array_param(f, values) for _, f, values in per_row]),
        names,
        to,
        common=common,
        counted=counted,
        event=(reason, actor, details),
    )
    ids = {row.job_id for row in moved}
    return [m.job_id for m in moves if m.job_id in ids]


class Moved(NamedTuple):
    """A job `move_selected` moved: the state it left, and its attempt then."""

    job_id: int
    from_state: str
    attempt: int


def move_selected(
    jobs: QuerySet[Job],
    to: JobState,
    *,
    reason: str,
    actor: str,
    details: Mapping[str, Any] | None = None,
    changes: Mapping[str, Any] | None = None,
) -> list[Moved]:
    """Move every job that `jobs` selects to `to`, each from the state the statement reads it
    in, in one statement as `move_jobs` (a set-based writer that needs no row in Python:
    cancelling an array's tasks). Returns the jobs moved, in id order.

    Raises InvalidTransition, writing nothing, when a job selected is in a state the machine
    forbids the move from: the statement reads the selection, checks it and moves it at once.
    """
    to = JobState(to)
    common = dict(changes or {})
    _check_fields((), [], common, ())
    allowed = sorted(s.value for s in JobState if to in TRANSITIONS[s])
    with transaction.atomic(savepoint=False):  # the selection's lock holds until commit
        # Locked as selected: a row another process changed meanwhile is selected (or not)
        # in its new state, and moved from it.
        selection = (
            jobs.order_by("id")
            .select_for_update(no_key=True, of=("self",))
            .annotate(
                gpus=F("workers") * F("gpus_per_worker"),
                gpu_share=gpu_share(),
            )
            .values_list(*(field for _, field in TARGET_COLUMNS[:-2]), "gpus", "gpu_share")
        )
        sql, params = selection.query.sql_with_params()
        head = f"""
        target ({", ".join(name for name, _ in TARGET_COLUMNS)}) AS ({sql}),
        forbidden AS (
            SELECT t.id, t.state AS seen FROM target t WHERE t.state <> ALL(%s::text[]) LIMIT 1
        )"""
        moved, forbidden = _execute(
            (head, [*params, allowed]),
            [],
            to,
            common=common,
            counted=(),
            event=(reason, actor, details),
            checked=True,
        )
    if forbidden is not None:
        check_transition(forbidden[0], forbidden[1], to)  # raises InvalidTransition
    return moved


# The columns of the rows to move, as the statement's `target` names them, and their fields.
TARGET_COLUMNS = (
    ("id", "id"),
    ("state", "state"),
    ("attempts", "attempts"),
    ("admitted_at", "admitted_at"),
    ("team_id", "team"),
    ("user_id", "user"),
    ("flavor_id", "flavor"),
    ("gpus", ""),  # workers × gpus_per_worker
    ("gpu_share", ""),  # what it holds of them (usage_ledger.gpu_share_sql)
)


def _share_sql(table: str, column: dict[str, str]) -> str:
    return gpu_share_sql(
        f"{table}.{column['workers']}",
        f"{table}.{column['gpus_per_worker']}",
        f"{table}.{column['gpu_milli']}",
    )


def _execute(
    head: tuple[str, list[Any]],
    names: list[str],
    to: JobState,
    *,
    common: dict[str, Any],
    counted: tuple[str, ...],
    event: tuple[str, str, Mapping[str, Any] | None],
    checked: bool = False,
) -> tuple[list[Moved], tuple[int, str] | None]:
    """The door's statement. `head` (SQL and its params) defines `target`, the rows to move,
    locked (TARGET_COLUMNS), and, for a batch of moves, `v`, whose columns are `names`: id,
    seen, then each move's own (c_<field>, reason, details). When `checked`, it also defines
    `forbidden`, a row in a state the move is not allowed from, and then nothing moves.
    Returns (the jobs moved, the forbidden row or None)."""
    reason, actor, details = event
    quote = connection.ops.quote_name
    params: list[Any] = list(head[1])

    def param(value: Any, cast: str) -> str:
        params.append(value)
        return f"%s::{cast}"

    job = quote(Job._meta.db_table)
    column = {f.name: quote(f.column) for f in Job._meta.concrete_fields}
    own = [name[2:] for name in names if name.startswith("c_")]
    assignments = [f"{column['state']} = {param(to.value, 'text')}"]
    assignments += [f"{column[name]} = v.c_{name}" for name in own]
    assignments += [
        f"{column[name]} = {param(_prepared(name, value), _cast(name))}"
        for name, value in common.items()
    ]
    assignments += [f"{column[name]} = j.{column[name]} + 1" for name in counted]
    if to != JobState.PREEMPTING and "preempted_for" not in (*own, *common):
        # Only a PREEMPTING row names the job it is preempted for: a move out of it forgets.
        assignments.append(f"{column['preempted_for']} = NULL")
    forget = ""
    if to != JobState.PENDING:
        # Only a PENDING job shows why it waits, where it stands and when it should start: a
        # move out of it forgets.
        assignments += [
            f"{column[name]} = NULL" for name in SHOWN_WHILE_PENDING if name not in (*own, *common)
        ]
        forget = (
            f"forgotten AS (DELETE FROM {quote(Standing._meta.db_table)} s USING moved m "
            "WHERE s.job_id = m.id),"
        )

    own_event = [n for n in ("reason", "details") if n in names]
    event_reason = "coalesce(m.reason, %s::text)" if "reason" in names else "%s::text"
    event_details = "coalesce(m.details, %s::jsonb)" if "details" in names else "%s::jsonb"
    event_field = JobEvent._meta.get_field
    event_columns = ", ".join(
        quote(event_field(name).column)
        for name in ("job", "at", "from_state", "to_state", "reason", "actor", "details")
    )
    # The rows' own columns come from `v` again only when there are any.
    per_row = "JOIN v ON v.id = t.id" if own or own_event else ""
    attempt = ", ".join(ATTEMPT_COLUMNS)
    releasing = _releasing(to)
    starting = sorted(s.value for s in JobState if starts(s, to))
    statement = f"""
    WITH {head[0]},
    moved AS (
        UPDATE {job} j SET {", ".join(assignments)}
        FROM target t {per_row}
        WHERE j.id = t.id AND j.{column["state"]} = t.state
          {"AND NOT EXISTS (SELECT FROM forbidden)" if checked else ""}
        RETURNING j.id, t.state AS from_state, t.attempts AS old_attempt,
                  t.admitted_at AS old_admitted_at, j.{column["attempts"]} AS attempt,
                  j.{column["admitted_at"]} AS admitted_at, t.team_id, t.user_id, t.flavor_id,
                  t.gpus, t.gpu_share{"".join(f", v.{n}" for n in own_event)}
    ),
    -- The caller's clock, advanced by however long the statement waited for its rows: a
    -- release ends after the minute's sweep that held a row wrote it (usage_ledger.py, 2).
    stamp AS (
        SELECT %s::timestamptz + (clock_timestamp() - statement_timestamp()) AS at
        FROM (SELECT count(*) FROM target) AS locked
    ),
    events AS (
        INSERT INTO {quote(JobEvent._meta.db_table)} ({event_columns})
        SELECT m.id, s.at, m.from_state, %s::text, {event_reason}, %s::text, {event_details}
        FROM moved m CROSS JOIN stamp s
    ),
    released ({attempt}) AS (
        SELECT m.id, m.old_attempt, m.old_admitted_at, m.team_id, m.user_id, m.flavor_id,
               m.gpus, m.gpu_share, m.from_state, s.at
        FROM moved m CROSS JOIN stamp s WHERE m.from_state = ANY(%s::text[])
    ),
    closing AS ({released_rows_sql("released", to)}),
    opened ({attempt}) AS (
        SELECT m.id, m.attempt, m.admitted_at, m.team_id, m.user_id, m.flavor_id, m.gpus,
               m.gpu_share, m.from_state, NULL::timestamptz
        FROM moved m WHERE m.from_state = ANY(%s::text[])
    ),
    {forget}
    opening AS ({opened_rows_sql("opened")})
    SELECT m.id, m.from_state, m.old_attempt, false FROM moved m
    {"UNION ALL SELECT f.id, f.seen, 0, true FROM forbidden f" if checked else ""}
    ORDER BY 1
    """
    params += [
        timezone.now(),  # as `auto_now_add` would, read as late as it can be
        to.value,
        reason,
        actor,
        event_field("details").get_db_prep_save(dict(details or {}), connection),
        releasing,
        starting,
    ]
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        rows = cursor.fetchall()
    forbidden = next(((job_id, seen) for job_id, seen, _, refused in rows if refused), None)
    return [Moved(*row[:3]) for row in rows if not row[3]], forbidden


def _releasing(to: JobState) -> list[str]:
    """The states a move to `to` releases GPUs from."""
    return sorted(s.value for s in JobState if releases(s, to))


def _check(moves: Sequence[Move], to: JobState) -> None:
    """InvalidTransition for the first move the state machine forbids (naming its job)."""
    allowed = {s.value for s in JobState if to in TRANSITIONS[s]}
    for move in moves:
        if move.seen not in allowed:
            check_transition(move.job_id, move.seen, to)  # raises InvalidTransition


def _check_fields(
    moves: Sequence[Move], own: list[str], common: Mapping[str, Any], counted: tuple[str, ...]
) -> None:
    """A move's fields are its own or the batch's, never the state (the door writes it), and
    every move of a batch names the same ones (each is one array of the statement)."""
    named = [*own, *common, *counted]
    if "state" in named:
        raise ValueError("the state is the move's target, not one of its changes")
    if len(set(named)) != len(named):
        raise ValueError(f"a field named twice among {sorted(named)}")
    for name in named:
        Job._meta.get_field(name)  # FieldDoesNotExist for a name that is no field
    wanted = set(own)
    for move in moves:
        if set(move.changes) != wanted:
            raise ValueError(
                f"job {move.job_id} changes {sorted(move.changes)}; the batch {sorted(wanted)}"
            )
    if len({m.job_id for m in moves}) != len(moves):
        raise ValueError("a job named twice in one batch")


def _prepared(name: str, value: Any) -> Any:
    return Job._meta.get_field(name).get_db_prep_save(value, connection)


def _cast(name: str) -> str:
    return str(Job._meta.get_field(name).cast_db_type(connection))


def transition(
    job: Job,
    to: JobState,
    *,
    reason: str,
    actor: str,
    details: dict[str, Any] | None = None,
    **changes: Any,
) -> bool:
    """Move `job` from the state it was read in to `to`, with `changes` to its fields.

    Raises InvalidTransition when the state machine forbids the move. Returns False, changing
    nothing, when another process moved the job first (the update is filtered on the state the
    caller saw, so two racing cycles cannot both admit, requeue or finish one job).
    """
    moved = move_jobs(
        [Move(job.pk, job.state)],
        to,
        reason=reason,
        actor=actor,
        details=details,
        changes=changes,
    )
    if not moved:
        return False
    job.state = to
    if to != JobState.PREEMPTING and "preempted_for" not in changes:
        job.preempted_for = None  # as the door wrote it (`_execute`)
    if to != JobState.PENDING:
        for name in SHOWN_WHILE_PENDING:
            if name not in changes:
                setattr(job, name, None)  # as the door wrote it
        job.standing_written()  # deleted by the door
    for name, value in changes.items():
        setattr(job, name, value)
    return True
