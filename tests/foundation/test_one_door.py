"""One door for a job's state (gpuqueue/services/jobs/transitions.py): no other module writes it,
and the door moves a batch as it moves one job: all checked first, only the rows still in the
state their caller saw, each with its event and its GPU-hours ledger rows."""

from __future__ import annotations

import ast
import re
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections
from django.db.models import Sum
from django.utils import timezone

from gpuqueue.core.states import InvalidTransition, JobState
from gpuqueue.models import Job, JobEvent, Standing, UsageRecord
from gpuqueue.services.jobs import transitions
from gpuqueue.services.jobs.admissions import Admitted, admit_all
from gpuqueue.services.jobs.transitions import Move, move_jobs, move_selected, transition
from tests.standings import show

REPOSITORY = Path(__file__).resolve().parents[2]
SCANNED = ("gpuqueue", "teams", "dashboard")

# --- No other door -------------------------------------------------------------------------------

# An assignment in the SET list of an UPDATE (or of an upsert's DO UPDATE) to a column named
# state: `state =`, `j.state =`, `"state" =`, or a placeholder that quotes 'state'.
_SET = re.compile(r"\bSET\b(.*?)(?=\bFROM\b|\bWHERE\b|\bRETURNING\b|;|$)", re.I | re.S)
_STATE_ASSIGNED = re.compile(
    r"(?:^|,)\s*(?:[\w\"]+\.)?(?:\"?state\"?|\{[^{}]*['\"]state['\"][^{}]*\})\s*=(?!=)", re.I
)


def _text(node: ast.AST, source: str) -> str | None:
    """A string literal's text; an f-string's with each placeholder as `{its source}`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value
            if isinstance(part, ast.Constant)
            else "{" + (ast.get_source_segment(source, part.value) or "") + "}"
            for part in node.values
        )
    return None


def _names_state(node: ast.AST) -> bool:
    """The literal "state", or a list, tuple, set or dict (its keys) that holds it."""
    if isinstance(node, ast.Constant):
        return node.value == "state"
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return any(_names_state(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return any(k is not None and _names_state(k) for k in node.keys)
    return False


def state_writes(source: str) -> list[tuple[int, str]]:
    """(line, how) for each place in `source` that writes the state of an existing row:

    - an ORM update naming it: `.update(state=…)`, `.update(**{"state": …})`;
    - "state" among the fields a call named *update* writes (`bulk_update(jobs, ["state"])`,
      `update_or_create(defaults={"state": …})`, a set-based helper given the column) or
      among a save's `update_fields`;
    - `obj.state = …`, which the next `save()` writes;
    - SQL that assigns the column in a SET list (`UPDATE … SET state = …`).

    Creation is not a move: a new row names its state in `Job(state=…)`, `create(…)`,
    `bulk_create` or an INSERT's column list, none of which these rules match; nor do reads
    (`filter(state=…)`, `WHERE state = …`)."""
    found: set[tuple[int, str]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "update" and any(
                kw.arg == "state" or (kw.arg is None and _names_state(kw.value))
                for kw in node.keywords
            ):
                found.add((node.lineno, "ORM update of state"))
            if "update" in name.lower() and (
                any(_names_state(a) for a in node.args)
                or any(kw.arg is not None and _names_state(kw.value) for kw in node.keywords)
            ):
                found.add((node.lineno, f"state among the fields {name}() writes"))
            if name == "save" and any(
                kw.arg == "update_fields" and _names_state(kw.value) for kw in node.keywords
            ):
                found.add((node.lineno, "save(update_fields=[… 'state' …])"))
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Attribute) and t.attr == "state" for t in targets):
                found.add((node.lineno, "obj.state = …"))
        elif (text := _text(node, source)) is not None:
            for clause in _SET.finditer(text):
                if _STATE_ASSIGNED.search(clause.group(1)):
                    found.add((getattr(node, "lineno", 0), "SQL SET state = …"))
    return sorted(found)


def door_bypasses(root: Path) -> list[str]:
    """Every state write under `root`'s packages outside the door. Migrations are left out:
    they run on historical models, which cannot call a service."""
    door = Path(transitions.__file__).resolve().relative_to(REPOSITORY)
    return [
        f"{path.relative_to(root)}:{line}: {how}"
        for package in SCANNED
        for path in sorted((root / package).rglob("*.py"))
        if "migrations" not in path.parts and path.relative_to(root) != door
        for line, how in state_writes(path.read_text())
    ]


def test_no_module_but_the_door_writes_a_jobs_state() -> None:
    assert door_bypasses(REPOSITORY) == []


@pytest.mark.parametrize(
    "source",
    [
        "Job.objects.filter(pk=1).update(state='FAILED', message='x')",
        "Job.objects.filter(pk=1).update(**{'state': 'FAILED'})",
        "Job.objects.bulk_update(jobs, ['state', 'finished_at'])",
        "job.save(update_fields=('state',))",
        "Job.objects.update_or_create(pk=1, defaults={'state': 'FAILED'})",
        "update_still_pending(('state', 'admitted_at'), rows)",
        "job.state = JobState.FAILED",
        "cursor.execute('UPDATE gpuqueue_job SET state = %s WHERE id = %s', [s, i])",
        "sql = f'UPDATE {job} j SET hold = \\'\\', state = \\'CANCELLED\\' FROM v'",
        "sql = f'UPDATE {job} SET {quote(\"state\")} = %s'",
        "sql = 'INSERT INTO t (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET \"state\" = 1'",
    ],
)
def test_the_scan_finds_each_way_of_writing_the_state(source: str) -> None:
    assert state_writes(source), source


@pytest.mark.parametrize(
    "source",
    [
        "Job(team=t, state=JobState.PENDING).save()",
        "Job.objects.create(state=JobState.PENDING)",
        "Job.objects.filter(state='PENDING').update(pending_reason=None)",
        "Job.objects.values_list('id', 'state')",
        "cursor.execute('INSERT INTO gpuqueue_job (state, name) VALUES (%s, %s)', p)",
        "sql = 'UPDATE gpuqueue_job j SET hold = w.hold FROM w WHERE j.state = %s'",
        "sql = 'UPDATE t SET pending_reason = CASE WHEN j.state = 1 THEN 2 END WHERE x'",
        "event = JobEvent(from_state='', to_state='PENDING')",
    ],
)
def test_the_scan_leaves_creation_and_reads_alone(source: str) -> None:
    assert state_writes(source) == [], source


# --- The door ------------------------------------------------------------------------------------


def _events(job_ids: list[int]) -> list[tuple[int, str, str]]:
    return list(
        JobEvent.objects.filter(job_id__in=job_ids)
        .exclude(from_state="")
        .order_by("job_id", "id")
        .values_list("job_id", "from_state", "to_state")
    )


def _admitted(submit: Any, n: int, hours_ago: float = 2.0) -> list[Job]:
    jobs = [submit(workers=1, gpus_per_worker=i + 1) for i in range(n)]
    at = timezone.now() - timedelta(hours=hours_ago)
    assert admit_all([Admitted(j.pk, {"h100-0": 1}, False) for j in jobs], at, "cycle")
    return list(Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk"))


def test_a_batch_with_one_forbidden_move_changes_nothing(submit: Any) -> None:
    running, admitted = _admitted(submit, 2)
    assert transition(running, JobState.RUNNING, reason="running", actor="test")
    pending = submit()
    before = (
        list(Job.objects.order_by("pk").values_list("pk", "state", "finished_at")),
        JobEvent.objects.count(),
        list(UsageRecord.objects.order_by("pk").values_list("pk", "gpu_seconds", "outcome")),
    )
    moves = [Move(running.pk, running.state), Move(pending.pk, pending.state)]
    moves.append(Move(admitted.pk, admitted.state))
    with pytest.raises(InvalidTransition) as refused:
        # PENDING -> SUCCEEDED is not a move of the machine; the others are.
        move_jobs(moves, JobState.SUCCEEDED, reason="done", actor="test")
    assert (refused.value.job_id, refused.value.from_state) == (pending.pk, JobState.PENDING)
    after = (
        list(Job.objects.order_by("pk").values_list("pk", "state", "finished_at")),
        JobEvent.objects.count(),
        list(UsageRecord.objects.order_by("pk").values_list("pk", "gpu_seconds", "outcome")),
    )
    assert after == before


def test_a_selection_holding_one_job_the_machine_forbids_moves_none(submit: Any) -> None:
    """The set-based form reads, checks and moves its selection in one statement: a finished
    job among it refuses the whole move, as a batch of moves would."""
    admitted, pending, done = _admitted(submit, 1)[0], submit(), submit()
    assert transition(done, JobState.CANCELLED, reason="user", actor="user:alice")
    events = JobEvent.objects.count()
    with pytest.raises(InvalidTransition) as refused:
        move_selected(
            Job.objects.filter(pk__in=[admitted.pk, pending.pk, done.pk]),
            JobState.FAILED,
            reason="node lost",
            actor="cluster",
            changes={"finished_at": timezone.now()},
        )
    assert (refused.value.job_id, refused.value.from_state) == (done.pk, JobState.CANCELLED)
    assert JobEvent.objects.count() == events
    assert [Job.objects.get(pk=j.pk).state for j in (admitted, pending, done)] == [
        JobState.ADMITTED,
        JobState.PENDING,
        JobState.CANCELLED,
    ]
    assert set(UsageRecord.objects.values_list("outcome", flat=True)) == {""}

    moved = move_selected(
        Job.objects.filter(pk__in=[admitted.pk, pending.pk]),
        JobState.FAILED,
        reason="node lost",
        actor="cluster",
        changes={"finished_at": timezone.now()},
    )
    assert [(m.job_id, m.from_state, m.attempt) for m in moved] == [
        (admitted.pk, JobState.ADMITTED, 1),
        (pending.pk, JobState.PENDING, 0),
    ]
    assert set(UsageRecord.objects.values_list("outcome", flat=True)) == {"failed"}


@pytest.mark.parametrize(
    "changes",
    [{"state": JobState.FAILED}, {"no_such_field": 1}],
    ids=["the state as a change", "no such field"],
)
def test_a_move_with_bad_changes_is_refused_and_changes_nothing(
    submit: Any, changes: dict[str, Any]
) -> None:
    job = submit()
    with pytest.raises(Exception) as refused:
        move_jobs(
            [Move(job.pk, job.state)], JobState.CANCELLED, reason="x", actor="t", changes=changes
        )
    assert not isinstance(refused.value, InvalidTransition)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and _events([job.pk]) == []


def test_moves_of_one_batch_must_name_the_same_fields(submit: Any) -> None:
    a, b = submit(), submit()
    with pytest.raises(ValueError, match="changes"):
        move_jobs(
            [Move(a.pk, a.state, changes={"message": "x"}), Move(b.pk, b.state)],
            JobState.CANCELLED,
            reason="x",
            actor="t",
        )
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.PENDING}


def test_events_and_ledger_rows_are_written_for_exactly_the_moved_rows(submit: Any) -> None:
    """A batch requeue of attempts in three holding states, one of which another process
    finished first: the other two move, each with one event and its attempt closed with the
    outcome of its move; the finished one keeps its own event and its own outcome."""
    admitted, running, preempting, finished = _admitted(submit, 4)
    for job in (running, preempting, finished):
        assert transition(job, JobState.RUNNING, reason="running", actor="test")
    assert transition(preempting, JobState.PREEMPTING, reason="preempt", actor="test")
    seen = {job.pk: job.state for job in (admitted, running, preempting, finished)}
    assert transition(finished, JobState.SUCCEEDED, reason="done", actor="cluster")

    moved = move_jobs(
        [Move(job_id, state, details={"attempt": 1}) for job_id, state in seen.items()],
        JobState.PENDING,
        reason="requeued",
        actor="cycle",
        changes={"placement": {}, "admitted_at": None},
    )

    assert moved == [admitted.pk, running.pk, preempting.pk]
    ids = [*moved, finished.pk]
    assert _events(ids) == [
        (admitted.pk, "PENDING", "ADMITTED"),
        (admitted.pk, "ADMITTED", "PENDING"),
        (running.pk, "PENDING", "ADMITTED"),
        (running.pk, "ADMITTED", "RUNNING"),
        (running.pk, "RUNNING", "PENDING"),
        (preempting.pk, "PENDING", "ADMITTED"),
        (preempting.pk, "ADMITTED", "RUNNING"),
        (preempting.pk, "RUNNING", "PREEMPTING"),
        (preempting.pk, "PREEMPTING", "PENDING"),
        (finished.pk, "PENDING", "ADMITTED"),
        (finished.pk, "ADMITTED", "RUNNING"),
        (finished.pk, "RUNNING", "SUCCEEDED"),
    ]
    requeues = JobEvent.objects.filter(job_id__in=moved, to_state=JobState.PENDING).exclude(
        from_state=""
    )
    assert {(e.reason, e.actor, e.details["attempt"]) for e in requeues} == {
        ("requeued", "cycle", 1)
    }
    assert len({e.at for e in requeues}) == 1  # one statement, one time
    outcomes = dict(UsageRecord.objects.values_list("job_id", "outcome").distinct())
    assert outcomes == {
        admitted.pk: "requeued",
        running.pk: "requeued",
        preempting.pk: "preempted",
        finished.pk: "succeeded",
    }
    for job in (admitted, running, preempting):
        end = requeues.get(job_id=job.pk).at
        held = UsageRecord.objects.filter(job_id=job.pk).aggregate(s=Sum("gpu_seconds"))["s"]
        assert held == pytest.approx(job.gpus * (end - job.admitted_at).total_seconds())
    assert set(Job.objects.filter(pk__in=moved).values_list("state", "admitted_at")) == {
        (JobState.PENDING, None)
    }


@pytest.mark.django_db(transaction=True)
def test_a_row_another_process_moves_meanwhile_is_skipped_not_evented_twice(
    submit: Any,
) -> None:
    """Another connection cancels a job and holds its row; a batch move of that job and two
    others, from the state they were read in, waits for the row, then skips it: the other
    process's move stands alone, with its single event and the attempt's one release."""
    jobs = _admitted(submit, 3)
    taken = jobs[1]
    locked, release = threading.Event(), threading.Event()

    def other_process() -> None:
        try:
            from django.db import transaction

            with transaction.atomic():
                assert transition(
                    Job.objects.get(pk=taken.pk), JobState.CANCELLED, reason="user", actor="u"
                )
                locked.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=other_process)
    thread.start()
    assert locked.wait(10)
    result: list[list[int]] = []
    mover = threading.Thread(
        target=lambda: (
            result.append(
                move_jobs(
                    [Move(j.pk, JobState.ADMITTED) for j in jobs],
                    JobState.RUNNING,
                    reason="running",
                    actor="cluster",
                )
            ),
            connections.close_all(),
        )
    )
    mover.start()
    _wait_for_a_lock_wait()
    release.set()
    thread.join(10)
    mover.join(10)

    assert result == [[jobs[0].pk, jobs[2].pk]]
    assert Job.objects.get(pk=taken.pk).state == JobState.CANCELLED
    assert _events([taken.pk]) == [
        (taken.pk, "PENDING", "ADMITTED"),
        (taken.pk, "ADMITTED", "CANCELLED"),
    ]
    assert set(UsageRecord.objects.filter(job_id=taken.pk).values_list("outcome", flat=True)) == {
        "cancelled"
    }
    assert set(
        UsageRecord.objects.filter(job_id__in=result[0]).values_list("outcome", flat=True)
    ) == {""}


def _wait_for_a_lock_wait() -> None:
    """Until some session of this database waits for a row lock (the batch, on the row the
    other process holds)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)
    raise AssertionError("the batch never waited for the row")


def test_a_job_moved_through_transition_is_one_move_of_the_door(submit: Any) -> None:
    (job,) = _admitted(submit, 1)
    assert transition(job, JobState.FAILED, reason="oom", actor="cluster", exit_code=137)
    assert (job.state, job.exit_code) == (JobState.FAILED, 137)
    assert Job.objects.get(pk=job.pk).state == JobState.FAILED
    assert set(UsageRecord.objects.filter(job_id=job.pk).values_list("outcome", flat=True)) == {
        "failed"
    }


def test_every_move_out_of_pending_forgets_what_the_job_showed_while_it_waited(
    submit: Any,
) -> None:
    """Only a PENDING job has a reason, places in line and an estimated start: the door clears
    them whichever form moves it out (one job, a batch, a selection), and a move back into
    PENDING keeps what the caller sets."""
    start = timezone.now() + timedelta(hours=1)
    one, batch, selected, admitted = submit(), submit(), submit(), submit()
    ids = [one.pk, batch.pk, selected.pk, admitted.pk]
    Job.objects.filter(pk__in=ids).update(estimated_start=start)
    for job_id in ids:
        show(job_id, reason={"code": "no_capacity"}, queue_position=2, cluster_position=5)
    one.refresh_from_db()
    assert one.pending_reason == {"code": "no_capacity"}

    assert transition(one, JobState.CANCELLED, reason="user", actor="user:alice")
    assert (one.pending_reason, one.queue_position, one.estimated_start) == (None, None, None)
    move_jobs([Move(batch.pk, JobState.PENDING)], JobState.FAILED, reason="x", actor="test")
    move_selected(Job.objects.filter(pk=selected.pk), JobState.CANCELLED, reason="x", actor="t")
    admit_all([Admitted(admitted.pk, {"h100-0": 1}, False)], timezone.now(), "cycle")
    assert (
        list(Job.objects.filter(pk__in=ids).values_list("estimated_start", flat=True)) == [None] * 4
    )
    assert not Standing.objects.filter(job_id__in=ids).exists()

    requeued = Job.objects.get(pk=admitted.pk)
    assert transition(requeued, JobState.PENDING, reason="x", actor="t", estimated_start=start)
    assert Job.objects.get(pk=admitted.pk).estimated_start == start


@pytest.mark.django_db(transaction=True)
def test_an_admission_wave_and_a_cancel_of_the_same_jobs_never_deadlock(submit: Any) -> None:
    """Every move locks its rows in id order, so two moves of overlapping jobs wait for each
    other instead of each holding a row the other needs. Staged: a third session holds the
    lower job; a cancel queues for it; an admission wave, whose scan meets the higher job
    first, then arrives. When the third session lets go, the cancel takes both jobs
    and the wave, finding them cancelled, moves none: no deadlock error in either."""
    low, high = (submit(workers=1, gpus_per_worker=1) for _ in range(2))
    assert low.pk < high.pk
    # The lower job's row rewritten: a scan of the table now meets the higher job first.
    Job.objects.filter(pk=low.pk).update(name="renamed")
    held, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    outcome: dict[str, Any] = {}

    def session(name: str, work: Any) -> threading.Thread:
        def run() -> None:
            try:
                outcome[name] = work()
            except BaseException as exc:  # noqa: BLE001 -- reported by the test below
                errors.append(exc)
            finally:
                connections.close_all()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def hold_low() -> None:
        from django.db import transaction

        with transaction.atomic():
            Job.objects.select_for_update(no_key=True).get(pk=low.pk)
            held.set()
            release.wait(10)

    holder = session("holder", hold_low)
    assert held.wait(10)
    cancel = session(
        "cancel",
        lambda: move_selected(
            Job.objects.filter(pk__in=[low.pk, high.pk]),
            JobState.CANCELLED,
            reason="user",
            actor="u",
        ),
    )
    _wait_for_lock_waits(1)
    wave = session(
        "wave",
        lambda: move_jobs(
            [Move(high.pk, JobState.PENDING), Move(low.pk, JobState.PENDING)],
            JobState.ADMITTED,
            reason="admitted",
            actor="cycle",
        ),
    )
    _wait_for_lock_waits(2)
    release.set()
    for thread in (holder, cancel, wave):
        thread.join(15)

    assert errors == []
    assert [m.job_id for m in outcome["cancel"]] == [low.pk, high.pk]
    assert outcome["wave"] == []
    assert set(Job.objects.filter(pk__in=[low.pk, high.pk]).values_list("state", flat=True)) == {
        JobState.CANCELLED
    }


def _wait_for_lock_waits(count: int) -> None:
    """Until `count` sessions of this database wait for a lock."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0] >= count:
                return
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} sessions ever waited for a lock")
