"""Jobs that wait for other jobs (Slurm's --dependency): `after_ok` (each succeeded),
`after_any` (each ended), `after_not_ok` (any failed or was cancelled: like Slurm's afternotok,
a failure is any end but success).

A job submitted with dependencies is written with `hold = dependencies`, which keeps it out of
the admission cycle's snapshot, and one JobDependency row per upstream job. The cycle's hold
phase (`resolve`) reads every waiting job with its upstream jobs' states and judges it by the
rules below (`conditions_met`, `unmeetable`), the same that refuse a submission: released when
each condition holds, cancelled as soon as one can no longer hold (an `after_ok` job failed or
was cancelled, or every `after_not_ok` job succeeded), unless the submitter asked to keep it,
and otherwise given a pending reason that names each job waited for and its state.

A cycle of dependencies cannot be made: a submission may only name jobs that exist already,
and a new job (or a new array's tasks) has no id anyone could have named before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from gpuqueue.core.reason_text import DEPENDENCIES, DEPENDENCY_UNMET
from gpuqueue.core.states import FINAL, JobState
from gpuqueue.models import DependencyKind, Flavor, Job, JobDependency, JobHold
from gpuqueue.services.jobs.pending import update_pending_reasons
from gpuqueue.services.jobs.submit import Submitted, submit_job
from gpuqueue.services.jobs.transitions import Move, move_jobs
from gpuqueue.services.jobs.validation import FieldErrors
from teams.models import Team

KINDS = tuple(DependencyKind.values)  # the submission's field names, in this order
MAX_DEPENDENCIES = 100
NOT_OK = frozenset({JobState.FAILED.value, JobState.CANCELLED.value})
ACTOR = "cycle"


@dataclass(frozen=True, slots=True)
class Dependencies:
    after_ok: tuple[int, ...] = ()
    after_any: tuple[int, ...] = ()
    after_not_ok: tuple[int, ...] = ()
    keep_if_unmet: bool = False

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Dependencies:
        """The dependency fields of a submission (each id once per kind)."""
        lists = {kind: tuple(dict.fromkeys(data.get(kind) or ())) for kind in KINDS}
        return cls(**lists, keep_if_unmet=bool(data.get("keep_if_unmet", False)))

    @classmethod
    def take(cls, data: dict[str, Any]) -> Dependencies:
        """The dependency fields, popped out of a validated submission."""
        deps = cls.of(data)
        for key in (*KINDS, "keep_if_unmet"):
            data.pop(key, None)
        return deps

    def pairs(self) -> list[tuple[int, str]]:
        return [(job_id, kind) for kind in KINDS for job_id in getattr(self, kind)]

    def __bool__(self) -> bool:
        return bool(self.after_ok or self.after_any or self.after_not_ok)


def met(kind: str, state: str) -> bool:
    """Whether one upstream job in `state` satisfies its part of a dependency of `kind` (for
    `after_not_ok` one such job is enough: see `conditions_met`)."""
    if kind == DependencyKind.AFTER_OK:
        return state == JobState.SUCCEEDED
    if kind == DependencyKind.AFTER_ANY:
        return state in FINAL
    return state in NOT_OK


Wait = tuple[int, str, str]  # (upstream job id, kind, its state)


def conditions_met(waits: Iterable[Wait]) -> bool:
    """Every `after_ok` and `after_any` job is done as asked, and, when there are
    `after_not_ok` jobs, at least one of them failed or was cancelled."""
    waits = list(waits)
    not_ok = [state for _, kind, state in waits if kind == DependencyKind.AFTER_NOT_OK]
    each = all(met(k, s) for _, k, s in waits if k != DependencyKind.AFTER_NOT_OK)
    return each and (not not_ok or any(s in NOT_OK for s in not_ok))


def unmeetable(waits: Iterable[Wait]) -> list[Wait]:
    """The waits that make the conditions impossible, in id order (none: still possible): each
    `after_ok` job that failed or was cancelled, and the `after_not_ok` jobs when all of them
    succeeded."""
    waits = list(waits)
    dead = [w for w in waits if w[1] == DependencyKind.AFTER_OK and w[2] in NOT_OK]
    not_ok = [w for w in waits if w[1] == DependencyKind.AFTER_NOT_OK]
    if not_ok and all(w[2] == JobState.SUCCEEDED for w in not_ok):
        dead += not_ok
    return sorted(dead)


NOT_VISIBLE = "No job {job_id} among the jobs you can see."


def dependency_errors(user: Any, deps: Dependencies) -> FieldErrors:
    """Refusals at the fields: a job the user cannot see (whether it exists is not said), one
    named under two kinds that contradict, too many, or one whose dependency can already never
    be met (the job would be cancelled at once)."""
    errors: FieldErrors = {}
    pairs = deps.pairs()
    if len(pairs) > MAX_DEPENDENCIES:
        errors["after_ok"] = [f"At most {MAX_DEPENDENCIES} dependencies; got {len(pairs)}."]
        return errors
    if not pairs:
        return errors
    wanted = {job_id for job_id, _ in pairs}
    states = dict(Job.objects.visible_to(user).filter(pk__in=wanted).values_list("id", "state"))
    for job_id, kind in pairs:
        if job_id not in states:
            errors.setdefault(kind, []).append(NOT_VISIBLE.format(job_id=job_id))
    seen = [(job_id, kind, states[job_id]) for job_id, kind in pairs if job_id in states]
    dead = [] if deps.keep_if_unmet else unmeetable(seen)
    for job_id, kind, state in dead:
        if kind == DependencyKind.AFTER_OK:
            message = f"Job {job_id} is {state}, so a job after_ok it could never start."
            errors.setdefault(kind, []).append(message)
    dead_not_ok = [w[0] for w in dead if w[1] == DependencyKind.AFTER_NOT_OK]
    if dead_not_ok:
        listed = ", ".join(str(j) for j in dead_not_ok)
        errors.setdefault(DependencyKind.AFTER_NOT_OK.value, []).append(
            f"Every after_not_ok job ({listed}) already SUCCEEDED, so the job could never start."
        )
    both = set(deps.after_ok) & set(deps.after_not_ok)
    if both:
        listed = ", ".join(str(j) for j in sorted(both))
        errors.setdefault("after_not_ok", []).append(
            f"Job(s) {listed} also in after_ok: no job can both succeed and not."
        )
    return errors


def waiting_reason(pairs: Iterable[tuple[int, str, str]], *, unmet: bool) -> dict[str, Any]:
    """A pending reason as data: each (job, kind, state) waited for, in id order."""
    waits = sorted([job_id, kind, state] for job_id, kind, state in pairs)
    return {
        "code": DEPENDENCY_UNMET if unmet else DEPENDENCIES,
        "numbers": {},
        "job_ids": sorted({w[0] for w in waits}),
        "waits": waits,
    }


def initial_reason(deps: Dependencies) -> dict[str, Any]:
    states = dict(
        Job.objects.filter(pk__in=[j for j, _ in deps.pairs()]).values_list("id", "state")
    )
    triples = [(job_id, kind, states.get(job_id, "?")) for job_id, kind in deps.pairs()]
    return waiting_reason(triples, unmet=bool(unmeetable(triples)))


def submit_job_after(
    user: Any,
    team: Team | None,
    flavor: Flavor,
    data: dict[str, Any],
    idempotency_key: str | None = None,
    idempotency_body: str | None = None,
) -> Submitted:
    """`submit_job`, and when `data` names dependencies, the job held for them and its
    JobDependency rows, in the same transaction (a retry with the key changes nothing)."""
    deps = Dependencies.take(data)
    if not deps:
        return submit_job(user, team, flavor, data, idempotency_key, idempotency_body)
    with transaction.atomic():
        result = submit_job(user, team, flavor, data, idempotency_key, idempotency_body)
        if result.created:
            reason = initial_reason(deps)
            Job.objects.filter(pk=result.job.pk).update(
                hold=JobHold.DEPENDENCIES, keep_if_unmet=deps.keep_if_unmet
            )
            update_pending_reasons([(result.job.pk, reason)])
            write_dependencies([result.job.pk], deps)
            job = result.job
            job.hold, job.keep_if_unmet = JobHold.DEPENDENCIES, deps.keep_if_unmet
            job.standing_written()
    return result


def write_dependencies(job_ids: list[int], deps: Dependencies) -> None:
    """Every job of `job_ids` waits for every upstream job of `deps`: one INSERT."""
    pairs = deps.pairs()
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_table(JobDependency)} (job_id, upstream_id, kind) "
            "SELECT j.id, d.upstream, d.kind FROM unnest(%s::bigint[]) AS j(id) "
            "CROSS JOIN unnest(%s::bigint[], %s::text[]) AS d(upstream, kind)",
            [job_ids, [p[0] for p in pairs], [p[1] for p in pairs]],
        )


def _table(model: Any) -> str:
    return str(connection.ops.quote_name(model._meta.db_table))


@dataclass(frozen=True, slots=True)
class Resolved:
    released: int = 0
    cancelled: int = 0
    reasons_written: int = 0


@dataclass(frozen=True, slots=True)
class Held:
    """A PENDING job held for dependencies, as the hold phase reads it."""

    job_id: int
    keep_if_unmet: bool
    reason: Any
    waits: tuple[Wait, ...]


def held_jobs() -> list[Held]:
    """Every PENDING job held for dependencies, with the state of each job it waits for, in id
    order: two queries (none past the first when nothing is held)."""
    jobs = list(
        Job.objects.filter(hold=JobHold.DEPENDENCIES, state=JobState.PENDING)
        .order_by("id")
        .values_list("id", "keep_if_unmet", "standing__reason")
    )
    if not jobs:
        return []
    waits: dict[int, list[Wait]] = {job_id: [] for job_id, _, _ in jobs}
    for job_id, upstream_id, kind, state in (
        JobDependency.objects.filter(job__hold=JobHold.DEPENDENCIES, job__state=JobState.PENDING)
        .order_by("job_id", "upstream_id", "kind")
        .values_list("job_id", "upstream_id", "kind", "upstream__state")
    ):
        if job_id in waits:  # not one held since the first query
            waits[job_id].append((upstream_id, kind, state))
    return [Held(job_id, keep, reason, tuple(waits[job_id])) for job_id, keep, reason in jobs]


def unmet_message(dead: Iterable[Wait]) -> str:
    """Why a job was cancelled: each wait that can no longer be met, in id order."""
    listed = ", ".join(f"job {job_id} is {state} ({kind})" for job_id, kind, state in dead)
    return f"a dependency can never be met: {listed}"


def resolve_once(now: datetime) -> Resolved:
    """One pass over the held jobs, judged by `conditions_met` and `unmeetable`:

    1. a job whose conditions hold is released (no hold, no reason);
    2. one whose conditions can no longer hold is cancelled with its event, unless it is kept;
    3. any other gets the reason it waits (`waiting_reason`), written only when it changed.

    Each write is guarded by PENDING, so a job cancelled meanwhile is left alone."""
    released: list[int] = []
    cancelled: list[Move] = []
    reasons: list[tuple[int, dict[str, Any]]] = []
    for held in held_jobs():
        if conditions_met(held.waits):
            released.append(held.job_id)
            continue
        dead = unmeetable(held.waits)
        if dead and not held.keep_if_unmet:
            message = unmet_message(dead)
            cancelled.append(
                Move(held.job_id, JobState.PENDING, changes={"message": message}, reason=message)
            )
            continue
        reason = waiting_reason(held.waits, unmet=bool(dead))
        if reason != held.reason:
            reasons.append((held.job_id, reason))
    n_released = 0
    if released:
        n_released = Job.objects.filter(
            pk__any=released, state=JobState.PENDING, hold=JobHold.DEPENDENCIES
        ).update(hold="")
        update_pending_reasons([(job_id, None) for job_id in released])  # PENDING ones only
    moved = move_jobs(
        cancelled,
        JobState.CANCELLED,
        reason="a dependency can never be met",
        actor=ACTOR,
        changes={"hold": "", "finished_at": now},
    )
    return Resolved(n_released, len(moved), update_pending_reasons(reasons))


# A cancelled job may make its own dependents' conditions impossible: the pass runs again until
# nothing more is cancelled (each round is one level of a chain; chains are short).
MAX_ROUNDS = 50


def resolve(now: datetime) -> Resolved:
    """Release, cancel or explain every job held for dependencies (see the module)."""
    released = cancelled = written = 0
    for _ in range(MAX_ROUNDS):
        r = resolve_once(now)
        released, cancelled = released + r.released, cancelled + r.cancelled
        written += r.reasons_written
        if not r.cancelled:
            break
    return Resolved(released, cancelled, written)


def links(user: Any, job: Job) -> dict[str, list[dict[str, Any]]]:
    """The jobs `job` waits for and those that wait for it, as far as `user` may see them:
    [{"job", "kind", "state", "name"}] each, in id order."""
    visible = Job.objects.visible_to(user)
    upstream = (
        JobDependency.objects.filter(job=job, upstream__in=visible)
        .order_by("upstream_id", "kind")
        .values_list("upstream_id", "kind", "upstream__state", "upstream__name")
    )
    downstream = (
        JobDependency.objects.filter(upstream=job, job__in=visible)
        .order_by("job_id", "kind")
        .values_list("job_id", "kind", "job__state", "job__name")
    )
    keys = ("job", "kind", "state", "name")
    return {
        "depends_on": [dict(zip(keys, row, strict=True)) for row in upstream],
        "dependents": [dict(zip(keys, row, strict=True)) for row in downstream],
    }
