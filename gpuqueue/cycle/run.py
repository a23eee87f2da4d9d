"""The admission cycle: one cluster-wide singleton that turns the queue into decisions.

1. Lock: a PostgreSQL advisory lock held for the cycle's transaction; if another cycle holds
   it, this one does nothing (the other is doing the same work).
2. Snapshot: first the hold phase (services/jobs/holds.py: jobs waiting for dependencies or for
   a slot of their array's %K are released or held, set-based), then flavors, nodes, teams
   with quotas (kept while their tables are unchanged: cycle/table_versions.py) and active
   jobs not held (the last read brought up to date by the change feed: cycle/job_feed.py);
   with time-based fair share (GPUQUEUE_TIME_BASED_SHARE), each team's stored balance
   advanced to now with what the snapshot shows (services/quotas/share_balance.py).
3. Plan: the pure engine decides admissions, preemptions and pending reasons; or, when only
   the clock moved and the last plan holds until later, that plan (cycle/kept_plan.py).
   (Estimated starts come from `refresh_forecasts`, a task of its own: the forecast replays
   the engine many times and must not slow admission down.)
4. Persist, in the same transaction: admissions and preemptions as filtered state updates
   (a row that moved since the snapshot is skipped), each with its JobEvent; the plan's fair
   shares (which the pages and /metrics show) and the advanced balances (a cycle that fails
   leaves both as they were).
   Withdrawn preemptions (the victim's GPUs claimed by no job any more) return the victim to
   RUNNING, if it has not acknowledged a checkpoint and its deadline has not passed, on a
   backend that can tell the workload (`ClusterBackend.withdraws_checkpoints`).
5. After commit: launch the admitted jobs, signal checkpoints and withdraw withdrawn ones on
   the backend. All are idempotent, and the cluster sync retries the launches and signals a
   crash here left undone; a withdrawal the backend could not make is logged, not retried
   (the workload may still save and exit).
6. Explain: reasons and positions on the pending jobs, only those that changed, in a
   transaction of their own (`_explain`); a reason equal to the one the kept read says the row
   shows is not turned into data again. When 5 calls the backend, the explain runs beside
   it, on a connection of its own (cycle/beside.py): after a wave, launching is mostly this
   process's work and explaining mostly PostgreSQL's.
Once planned, a large cycle's objects are frozen out of the garbage collector
(cycle/collector.py).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from gpuqueue import scheduler
from gpuqueue.cluster import get_backend
from gpuqueue.cluster.base import ClusterBackend, ClusterError
from gpuqueue.core import pod_sets
from gpuqueue.core.locks import try_xact_lock
from gpuqueue.core.reason_text import when
from gpuqueue.core.states import JobState
from gpuqueue.cycle.beside import beside
from gpuqueue.cycle.collector import freeze, release_when_due
from gpuqueue.cycle.job_feed import current_read, remember_shown
from gpuqueue.cycle.kept_plan import keep_plan, kept_plan
from gpuqueue.cycle.launch import launch_admitted
from gpuqueue.cycle.snapshot import StoredPending, load_snapshot, policy_from_settings
from gpuqueue.log_config import SUMMARY_LOGGER
from gpuqueue.models import Job
from gpuqueue.scheduler import model as m
from gpuqueue.scheduler.band import forecast_band
from gpuqueue.scheduler.band_misses import widen
from gpuqueue.scheduler.runtime import paused_gc
from gpuqueue.services.forecasts.band_samples import band_stretch, keep_samples
from gpuqueue.services.forecasts.moves import moves
from gpuqueue.services.forecasts.runtime_history import (
    predictions_for,
    runtime_history,
    store_forecasts,
    with_predicted_runtimes,
)
from gpuqueue.services.jobs.admissions import Admitted, admit_all
from gpuqueue.services.jobs.holds import update_holds
from gpuqueue.services.jobs.pending import update_estimated_starts, update_pending_rows
from gpuqueue.services.jobs.transitions import transition
from gpuqueue.services.quotas.fair_shares import store_fair_shares
from gpuqueue.services.quotas.share_balance import advance_balances, load_balances, store_balances

log = logging.getLogger(__name__)
summary = logging.getLogger(SUMMARY_LOGGER)
ACTOR = "cycle"


@dataclass
class CycleResult:
    ran: bool
    kept_plan: bool = False  # the last plan still held: nothing planned or written
    admitted: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    withdrawn: list[int] = field(default_factory=list)  # preemptions withdrawn
    pending: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)


def run_cycle(now: datetime | None = None, backend: ClusterBackend | None = None) -> CycleResult:
    timings: dict[str, float] = {}
    started = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal started
        timings[phase] = round(time.perf_counter() - started, 6)
        started = time.perf_counter()

    with transaction.atomic():
        # 1. Lock
        if not try_xact_lock("admission_cycle"):
            return CycleResult(ran=False)
        now = now or timezone.now()
        lap("1_lock")
        # 2. Snapshot
        update_holds(now)
        stored: dict[int, StoredPending] = {}
        # Tens of thousands of jobs read, all kept for the plan, and then by this process
        # (cycle/collector.py): a collection meanwhile would only walk them (a third of a
        # wave's snapshot at 50,000 pending).
        with paused_gc():
            snapshot = load_snapshot(now, stored)
            # Jobs that declared no runtime get their median predicted from finished jobs.
            snapshot = with_predicted_runtimes(snapshot)
            policy = policy_from_settings()
            balances = None
            if policy.time_based_share:
                balances = advance_balances(snapshot, policy.share_half_life_seconds)
                snapshot = replace(snapshot, share_balance=balances.snapshot())
            lap("2_snapshot")
            # 3. Plan, unless only the clock moved since the last and the engine said its plan
            #    holds until later (cycle/kept_plan.py): then the rows show it already.
            plan = kept_plan(snapshot, policy)
            kept = plan is not None
            read = current_read()
            mark = read.mark if read is not None else -1
            known = read.reasons if read is not None else {}
            if plan is None:
                plan = scheduler.plan(snapshot, policy)
            # What the snapshot read and the plan made stays: out of the collector's way.
            freeze(len(snapshot.running) + len(snapshot.pending))
        lap("3_plan")
        # 4. Persist what was decided
        backend = backend or get_backend()
        admitted: list[int] = []
        preempted: list[tuple[int, int, datetime]] = []
        withdrawn: list[tuple[int, int]] = []
        if not kept:
            admitted = _persist_admissions(plan, now, snapshot)
            preempted = _persist_preemptions(plan, now)
            if backend.withdraws_checkpoints:
                withdrawn = _persist_withdrawals(plan, now)
            store_fair_shares(plan.fair_shares, now)
        if balances is not None:
            store_balances(balances, now)
        lap("4_persist")
    # 5. After commit. With the backend to call, the explain (6) runs beside it: launching is
    #    mostly this process's work, the explain mostly PostgreSQL's (cycle/beside.py).
    explained = None
    if not kept and (admitted or preempted or withdrawn):
        explained = beside(lambda: _explain(plan, stored, known, snapshot, policy, mark))
    try:
        _apply(backend, admitted, preempted, withdrawn)
    except BaseException:
        if explained is not None:  # not left running behind the error: waited for, not raised
            with contextlib.suppress(BaseException):
                explained()
        raise
    lap("5_apply")
    # 6. Explain (what is left of it to wait for, when it ran beside the launch)
    if explained is not None:
        explained()
    elif not kept:
        _explain(plan, stored, known, snapshot, policy, mark)
    lap("6_explain")
    release_when_due()  # reference cycles freed while frozen, every ten minutes
    log.info(
        "cycle: %d admitted, %d preempted, %d pending%s, %s",
        len(admitted),
        len(preempted),
        len(plan.pending),
        " (the last plan kept)" if kept else "",
        timings,
    )
    if admitted or preempted or withdrawn:
        summary.info(
            cycle_summary(len(admitted), len(preempted), len(withdrawn), len(plan.pending))
        )
    return CycleResult(
        ran=True,
        kept_plan=kept,
        admitted=admitted,
        preempted=[p[0] for p in preempted],
        withdrawn=[w[0] for w in withdrawn],
        pending=len(plan.pending),
        phase_seconds=timings,
    )


def _apply(
    backend: ClusterBackend,
    admitted: list[int],
    preempted: list[tuple[int, int, datetime]],
    withdrawn: list[tuple[int, int]],
) -> None:
    """Phase 5: launch the admitted jobs, signal checkpoints, withdraw withdrawn ones."""
    if admitted:
        launch_admitted(admitted, backend)
    for job_id, attempt, deadline in preempted:
        try:
            backend.request_checkpoint(job_id, attempt, deadline)
        except ClusterError as exc:
            log.warning("checkpoint signal for job %s deferred: %s", job_id, exc)
    for job_id, attempt in withdrawn:
        try:
            backend.withdraw_checkpoint(job_id, attempt)
        except ClusterError as exc:
            log.warning("checkpoint withdrawal for job %s failed: %s", job_id, exc)


def cycle_summary(admitted: int, preempted: int, withdrawn: int, pending: int) -> str:
    """The line `make run` shows for a cycle that changed something."""
    parts = [f"{admitted} admitted", f"{preempted} preempted"]
    if withdrawn:
        parts.append(f"{withdrawn} preemptions withdrawn")
    return f"cycle: {', '.join(parts)}; {pending} pending"


def _persist_admissions(plan: m.Plan, now: datetime, snapshot: m.Snapshot) -> list[int]:
    """In bulk (gpuqueue.services.jobs.admissions); a job moved since the snapshot (cancelled) is
    skipped. A gang of pods of different asks is stored in units, with each pod's node
    (core/pod_sets.py)."""
    asks = {}
    if any(a.pods for a in plan.admissions):
        asks = {job.id: job.pods for job in snapshot.pending if job.pods}
    return admit_all(
        [
            Admitted(
                a.job_id,
                (
                    pod_sets.unit_placement(a.pods, asks[a.job_id])
                    if a.pods
                    else {node: workers for node, workers in a.placement}
                ),
                a.borrowed,
                [[node, index] for node, index in a.devices],
                a.domain,
                list(a.pods) if a.pods else None,
            )
            for a in plan.admissions
        ],
        now,
        ACTOR,
    )


def _persist_preemptions(plan: m.Plan, now: datetime) -> list[tuple[int, int, datetime]]:
    preempted: list[tuple[int, int, datetime]] = []
    if not plan.preemptions:
        return preempted
    victims = Job.objects.in_bulk([p.job_id for p in plan.preemptions])
    for preemption in plan.preemptions:
        job = victims.get(preemption.job_id)
        if job is None or job.state not in (JobState.ADMITTED, JobState.RUNNING):
            continue
        deadline = now + timedelta(seconds=job.checkpoint_grace_seconds)
        moved = transition(
            job,
            JobState.PREEMPTING,
            reason=f"preempted ({preemption.reason}) for job {preemption.for_job_id}; "
            f"checkpoint requested: {job.checkpoint_grace_seconds} s to save, until "
            f"{when(deadline.timestamp(), seconds=True)}",
            actor=ACTOR,
            details={
                "for_job": preemption.for_job_id,
                "kind": preemption.reason,
                "deadline": deadline.isoformat(),
            },
            checkpoint_requested_at=now,
            checkpoint_deadline=deadline,
            checkpoint_acked_at=None,
            preempted_for=preemption.for_job_id,
        )
        if moved:
            preempted.append((job.pk, job.attempts, deadline))
    return preempted


def _persist_withdrawals(plan: m.Plan, now: datetime) -> list[tuple[int, int]]:
    """Victims whose preemption the plan withdraws go back to RUNNING (ADMITTED when never seen
    running), if they are still preempting, have acknowledged no checkpoint and their deadline
    is ahead: the rows are locked first, so that an acknowledgement arriving meanwhile waits
    and then finds the job running (and changes nothing). Returns (job id, attempt) to tell
    the backend after commit."""
    if not plan.withdrawals:
        return []
    withdrawn: list[tuple[int, int]] = []
    victims = (
        Job.objects.select_for_update(no_key=True)
        .filter(
            pk__in=plan.withdrawals,
            state=JobState.PREEMPTING,
            checkpoint_acked_at__isnull=True,
            checkpoint_deadline__gt=now,
        )
        .order_by("pk")
    )
    for job in victims:
        back = JobState.RUNNING if job.started_at is not None else JobState.ADMITTED
        moved = transition(
            job,
            back,
            reason="preemption withdrawn: no job needs its GPUs any more; the checkpoint "
            "request is withdrawn and the job goes on",
            actor=ACTOR,
            details={"withdrawn": True},
            checkpoint_requested_at=None,
            checkpoint_deadline=None,
        )
        if moved:
            withdrawn.append((job.pk, job.attempts))
    return withdrawn


def _explain(
    plan: m.Plan,
    stored: dict[int, StoredPending],
    known: dict[int, m.Reason],
    snapshot: m.Snapshot,
    policy: m.Policy,
    mark: int,
) -> None:
    """Reasons and positions of the jobs left pending, in a transaction of their own under
    the cycle's lock: after a wave they are tens of thousands of rows, which the admissions
    need not wait for. A newer cycle that holds the lock writes its own instead; a crash
    before this leaves the last ones shown until the next cycle writes them."""
    with transaction.atomic():
        if not try_xact_lock("admission_cycle"):
            return
        # Up to a reason's data per pending job made, and kept (job_feed.remember_shown): a
        # collection meanwhile would only walk the cycle's kept objects, as in the snapshot.
        with paused_gc():
            _persist_pending(plan, stored, known)
        keep_plan(snapshot, policy, plan, mark)  # what it says is on the rows now


def reason_as_data(reason: m.Reason) -> dict[str, Any]:
    # JSON has no infinity: an unknown time (math.inf in the engine) is stored as null.
    numbers = {
        key: None if isinstance(value, float) and not math.isfinite(value) else value
        for key, value in reason.numbers.items()
    }
    return {"code": reason.code.value, "numbers": numbers, "job_ids": list(reason.job_ids)}


def _persist_pending(
    plan: m.Plan, stored: dict[int, StoredPending], known: dict[int, m.Reason]
) -> None:
    """Write reasons and positions that moved since the snapshot (most of a long queue reads
    the same from one cycle to the next), in one UPDATE: at a few thousand
    pending jobs, model instances and `bulk_update`'s CASE expressions cost most of a cycle.
    A reason equal to the one `known` says the row shows (the engine's, as the last cycle
    wrote it: cycle/job_feed.py) is not turned into data again: only the positions are
    compared."""
    changed = []
    learned: dict[int, m.Reason] = {}  # the reasons of rows written, or newly known equal
    for decision in plan.pending:
        job_id, reason = decision.job_id, decision.reason
        shown = stored.get(job_id)
        last = known.get(job_id)
        if shown is not None and last is not None and (last is reason or last == reason):
            if shown[1] == decision.team_position and shown[2] == decision.cluster_position:
                continue
            values = (shown[0], decision.team_position, decision.cluster_position)
            learned[job_id] = last
        else:
            values = (reason_as_data(reason), decision.team_position, decision.cluster_position)
            learned[job_id] = reason
            if values == shown:
                continue
        changed.append((job_id, *values))
    update_pending_rows(changed)  # columns the feed is told of, not marked (job_feed.SHOWN)
    remember_shown(changed, learned)


def refresh_forecasts(now: datetime | None = None) -> int:
    """Store an estimated start on every pending job; returns how many have one.

    Runs outside the admission lock on a snapshot of its own: an estimate a few seconds stale
    is fine, a slow admission cycle is not. Only estimates that moved are written.
    """
    now = now or timezone.now()
    snapshot = load_snapshot(now)
    if not snapshot.pending:
        return 0
    policy = policy_from_settings()
    if policy.time_based_share:
        # The balances as the last cycle left them (read only: only the cycle advances them).
        snapshot = replace(snapshot, share_balance=load_balances()[0])
    # The most likely start at predicted median runtimes, and its band (scheduler/band.py).
    with paused_gc():
        predictions = predictions_for(snapshot)
        history = runtime_history()
        levels = history.band_levels()  # calibrated (scheduler/prediction.py)
        declared = history.declared_spread(levels)
        bands = forecast_band(snapshot, predictions, policy, levels=levels, declared=declared)
    # Stretched by what earlier bands missed by (scheduler/band_misses.py), which learns from
    # the bands as forecast: those are what is kept.
    keep_samples(snapshot.now, bands)
    by = band_stretch(snapshot.now)
    bands = {job_id: widen(band, snapshot.now, by) for job_id, band in bands.items()}
    starts = {job_id: band.likely for job_id, band in bands.items()}
    # Every pending job: one the snapshot missed has no forecast, which it shows already.
    pending = Job.objects.filter(state=JobState.PENDING)
    rows = list(pending.values_list("id", "estimated_start", "forecast"))
    stored = {job_id: start for job_id, start, _ in rows}
    estimates = {}
    for job_id in stored:
        start = starts.get(job_id)
        known = start is not None and math.isfinite(start)
        estimates[job_id] = datetime.fromtimestamp(start, tz=UTC) if known else None
    # Estimates that moved later since the previous forecast, and why (forecasts/moves.py).
    since = _forecast_at(None) or now - FORECAST_WINDOW
    pending_facts = [(j.id, j.team, j.flavor, j.submitted_at) for j in snapshot.pending]
    forecasts = {job_id: (start, data) for job_id, start, data in rows}
    later = moves(pending_facts, forecasts, estimates, since, now)
    _forecast_at(now)
    # Nothing the cycle reads: the change feed's trigger leaves these rows unmarked.
    with transaction.atomic():
        store_forecasts(
            snapshot, bands, predictions, {job_id: data for job_id, _, data in rows}, later
        )
        update_estimated_starts(
            [(job_id, start) for job_id, start in estimates.items() if start != stored[job_id]]
        )
    return sum(1 for start in estimates.values() if start is not None)


# Forecasts may take at most this share of a worker's time: at thousands of pending jobs one
# forecast replays the engine for seconds, and running it every GPUQUEUE_FORECAST_SECONDS
# regardless would starve everything else on a small machine.
FORECAST_DUTY = 0.1


def forecast_due(now: float, last_finished: float | None, last_seconds: float) -> bool:
    """Whether a forecast may run at `now` (epoch seconds), given when the previous one ended
    and how long it took: it waits (1 / FORECAST_DUTY - 1) times that long."""
    if last_finished is None:
        return True
    return now >= last_finished + last_seconds * (1 / FORECAST_DUTY - 1)


FORECAST_TIMING_KEY = "gpuqueue:forecast:last"  # (finished at, seconds taken)
# The time of the last forecast, from which the next finds why an estimate moved later; with
# none known, the jobs admitted in the last FORECAST_WINDOW are read.
FORECAST_AT_KEY = "gpuqueue:forecast:at"
FORECAST_WINDOW = timedelta(minutes=10)


def _forecast_at(now: datetime | None) -> datetime | None:
    """Record `now` as the last forecast's time, or (None) read it; None when unknown."""
    try:
        if now is None:
            at = cache.get(FORECAST_AT_KEY)
            return at if isinstance(at, datetime) else None
        cache.set(FORECAST_AT_KEY, now, timeout=86400)
    except Exception:  # noqa: BLE001
        log.warning("the last forecast's time is unavailable", exc_info=True)
    return None


def refresh_forecasts_when_due() -> int | None:
    """`refresh_forecasts` unless the last forecast was so slow that running again now would
    exceed its share of the worker (`forecast_due`); None when skipped. The timing lives in
    the cache (Redis) so that every worker process sees it; without Redis, forecasts run on
    the beat's period."""
    try:
        last = cache.get(FORECAST_TIMING_KEY)
    except Exception:  # noqa: BLE001
        log.warning("forecast timing unavailable", exc_info=True)
        last = None
    if last is not None and not forecast_due(time.time(), last[0], last[1]):
        return None
    started = time.monotonic()
    count = refresh_forecasts()
    try:
        cache.set(FORECAST_TIMING_KEY, (time.time(), time.monotonic() - started), timeout=3600)
    except Exception:  # noqa: BLE001
        log.warning("could not record the forecast time", exc_info=True)
    return count
