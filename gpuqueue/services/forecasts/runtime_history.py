"""Runtime predictions in the service: the history is the jobs that finished, in PostgreSQL.

The engine's predictor (gpuqueue/scheduler/prediction.py) is fed the last `HISTORY_JOBS`
succeeded jobs, oldest first, each with its runtime (finished minus started); the same code
the replay feeds as its jobs finish. A process keeps the history it built for
`HISTORY_SECONDS`, about one admission cycle: reading a few thousand rows every cycle would
cost more than the plan. A job's facts (user, team, shape, name, image) never change, so they
are read once per job and kept.

Users: the admission cycle and the forecast (`with_predicted_runtimes`, `predictions_for`);
the forecast stores its band and the prediction it used on each pending job (`store_forecasts`),
which the API, the job page and the CLI show.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gpuqueue.core.caches import Kept
from gpuqueue.core.states import FINAL, JobState
from gpuqueue.models import Job
from gpuqueue.scheduler.band import Estimate
from gpuqueue.scheduler.model import PendingJob, RunningJob, Snapshot
from gpuqueue.scheduler.prediction import (
    MEDIAN,
    JobFacts,
    Prediction,
    RuntimeHistory,
    release_level,
)
from gpuqueue.services.forecasts.moves import later_text
from gpuqueue.services.jobs.pending import update_still_pending

HISTORY_JOBS = 5000
HISTORY_SECONDS = 60.0
# Kept per process (gpuqueue/core/caches.py: nothing is kept with GPUQUEUE_CACHES off): the
# history for HISTORY_SECONDS; each job's facts, which never change, for a day.
_history: Kept[str, RuntimeHistory] = Kept(max_entries=1, max_age_seconds=HISTORY_SECONDS)
_facts: Kept[int, JobFacts] = Kept(max_entries=200_000, max_age_seconds=86400.0)
_ALWAYS = "current"  # the version of what is kept: nothing stales it but its age
_FACT_FIELDS = ("user_id", "team__slug", "flavor__name", "workers", "gpus_per_worker", "name")


def _facts_from(values: Iterable[Any]) -> JobFacts:
    user_id, team, flavor, workers, gpus_per_worker, name, image = values
    return JobFacts(
        user=str(user_id),  # the engine's user (cycle/snapshot.py)
        team=team,
        flavor=flavor,
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        name=name,
        image=image,
    )


def runtime_history() -> RuntimeHistory:
    """The predictor fed from the last HISTORY_JOBS succeeded jobs (kept HISTORY_SECONDS)."""
    kept = _history.get("history", _ALWAYS)
    if kept is not None:
        return kept
    rows = (
        Job.objects.filter(
            state=JobState.SUCCEEDED, started_at__isnull=False, finished_at__isnull=False
        )
        .order_by("-finished_at", "-id")
        .values_list(
            *_FACT_FIELDS, "image", "started_at", "finished_at", "expected_runtime_seconds"
        )[:HISTORY_JOBS]
    )
    history = RuntimeHistory()
    history.record_all(  # oldest first: each key keeps its most recent runtimes
        (_facts_from(facts), (finished - started).total_seconds(), declared)
        for *facts, started, finished, declared in reversed(list(rows))
    )
    _history.put("history", _ALWAYS, history)
    return history


def _facts_by_id(ids: list[int]) -> dict[int, JobFacts]:
    known = _facts.get_many(dict.fromkeys(ids, _ALWAYS))
    missing = [i for i, facts in known.items() if facts is None]
    out = {i: facts for i, facts in known.items() if facts is not None}
    if missing:
        rows = Job.objects.filter(id__any=missing).values_list("id", *_FACT_FIELDS, "image")
        read = {job_id: _facts_from(facts) for job_id, *facts in rows}
        _facts.put_many({i: (_ALWAYS, facts) for i, facts in read.items()})
        out.update(read)
    return out


def predictions_for(snapshot: Snapshot) -> dict[int, Prediction]:
    """A prediction per job of the snapshot that has no expected runtime of its own."""
    history = runtime_history()
    ids = [j.id for j in snapshot.running if j.expected_runtime is None]
    ids += [j.id for j in snapshot.pending if j.expected_runtime is None]
    out: dict[int, Prediction] = {}
    for job_id, facts in _facts_by_id(ids).items():
        prediction = history.predict(facts)
        if prediction is not None:
            out[job_id] = prediction
    return out


class _PredictedPending:
    """Pending jobs with their median predicted runtime.

    The admission cycle runs at tens of thousands of pending jobs, so this must cost next to
    nothing when nothing changed: the snapshot keeps each pending job's object from cycle to
    cycle while its row is unchanged (cycle/job_feed.py), so a job whose object
    is the one seen last time takes the same predicted copy. Under the same history object
    that is all; once the history is read again, each kept job's median is read again (once
    per distinct facts) and only the jobs whose median moved are copied anew.
    """

    def __init__(self) -> None:
        self.history: RuntimeHistory | None = None
        # id -> (the snapshot's job, that job with its predicted runtime, its facts)
        self.jobs: dict[int, tuple[PendingJob, PendingJob, JobFacts]] = {}

    def apply(
        self, history: RuntimeHistory, jobs: tuple[PendingJob, ...]
    ) -> tuple[PendingJob, ...]:
        same = history is self.history
        known = self.jobs
        kept: dict[int, tuple[PendingJob, PendingJob, JobFacts]] = {}
        medians: dict[JobFacts, float | None] = {}  # many jobs share their facts

        def median(facts: JobFacts) -> float | None:
            if facts not in medians:
                prediction = history.predict(facts)
                medians[facts] = None if prediction is None else prediction.quantile(MEDIAN)
            return medians[facts]

        out: list[PendingJob] = []
        missing: list[int] = []  # places in `out` still to predict
        for job in jobs:
            if job.expected_runtime is None:
                hit = known.get(job.id)
                if hit is not None and hit[0] is job:
                    if not same and median(hit[2]) != hit[1].expected_runtime:
                        hit = (job, _predicted(job, median(hit[2])), hit[2])
                    kept[job.id] = hit
                    job = hit[1]
                else:
                    missing.append(len(out))
            out.append(job)
        if missing:
            facts = _facts_by_id([out[i].id for i in missing])
            for i in missing:
                job = out[i]
                job_facts = facts.get(job.id)
                if job_facts is not None:  # else no longer in the table
                    out[i] = _predicted(job, median(job_facts))
                    # Kept even without a prediction: none until the history changes.
                    kept[job.id] = (job, out[i], job_facts)
        self.history, self.jobs = history, kept
        return tuple(out)


def _predicted(job: PendingJob, median: float | None) -> PendingJob:
    return job if median is None else replace(job, expected_runtime=median, runtime_predicted=True)


_PREDICTED_PENDING = _PredictedPending()


def with_predicted_runtimes(snapshot: Snapshot) -> Snapshot:
    """The snapshot with a predicted runtime on every job that declared none, as the engine's
    order, reservations and backfill read it (and as the replay gives it): a pending job's
    median, a running job's release (`with_releases`). Both kinds of job keep what was
    predicted for them from one cycle to the next; a running job's remaining time, which
    depends on how long it has run, is read from it at every cycle."""
    history = runtime_history()
    pending = _PREDICTED_PENDING.apply(history, snapshot.pending)
    predictions = _PREDICTED_RUNNING.predictions(history, snapshot.running)
    return replace(snapshot, pending=pending, running=with_releases(snapshot, predictions))


def with_releases(
    snapshot: Snapshot, predictions: Mapping[int, Prediction]
) -> tuple[RunningJob, ...]:
    """The running jobs with, where they declared no runtime, the time they have run plus what
    is left of their prediction at `release_level`: when their GPUs should come back to a
    reservation (the median for a job filling its node, later for one sharing it)."""
    now = snapshot.now
    capacity = {node.name: node.capacity for node in snapshot.nodes}
    running = []
    for job in snapshot.running:
        prediction = predictions.get(job.id)
        if job.expected_runtime is None and prediction is not None:
            ran = max(now - job.started_at, 0.0)
            node = capacity.get(job.placement[0][0], {}) if job.placement else {}
            level = release_level(job.gpus_per_worker, node.get(job.flavor, 0))
            job = replace(job, expected_runtime=ran + prediction.remaining(ran, level))
        running.append(job)
    return tuple(running)


class _PredictedRunning:
    """Each running job's prediction (or None) from one history object: a job's facts never
    change, only how long it has run, which `with_releases` reads at every cycle."""

    def __init__(self) -> None:
        self.history: RuntimeHistory | None = None
        self.known: dict[int, Prediction | None] = {}

    def predictions(
        self, history: RuntimeHistory, jobs: tuple[RunningJob, ...]
    ) -> dict[int, Prediction]:
        known = self.known if history is self.history else {}
        ids = [j.id for j in jobs if j.expected_runtime is None]
        for job_id, facts in _facts_by_id([i for i in ids if i not in known]).items():
            known[job_id] = history.predict(facts)
        self.history, self.known = history, {i: known[i] for i in ids if i in known}
        return {i: p for i, p in self.known.items() if p is not None}


_PREDICTED_RUNNING = _PredictedRunning()


def _moment(seconds: float | None) -> str | None:
    if seconds is None or not math.isfinite(seconds):
        return None
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat()


def forecast_data(estimate: Estimate, runtime: dict[str, Any] | None) -> dict[str, Any]:
    """As stored in Job.forecast: the band as ISO times, why there is no estimate, and the
    runtime prediction used ({p10, p50, p90 seconds, source, samples}; source "declared" for
    an expected runtime the job gave)."""
    return {
        "early": _moment(estimate.early),
        "late": _moment(estimate.late),
        "why_none": estimate.why_none,
        "runtime": runtime,
    }


def store_forecasts(
    snapshot: Snapshot,
    estimates: Mapping[int, Estimate],
    predictions: Mapping[int, Prediction],
    stored: Mapping[int, Any],
    later: Mapping[int, dict[str, Any] | None] | None = None,
) -> int:
    """Write each pending job's forecast where it moved (`stored`: job id -> what it holds),
    with its record of estimates that moved later (`later`: forecasts/moves.py)."""
    declared = {j.id: j.expected_runtime for j in snapshot.pending if j.expected_runtime}
    rows = []
    for job_id, estimate in estimates.items():
        runtime: dict[str, Any] | None = None
        if job_id in declared:
            seconds = round(declared[job_id])
            runtime = {"p10": seconds, "p50": seconds, "p90": seconds, "source": "declared"}
            runtime["samples"] = 0
        elif job_id in predictions:
            runtime = predictions[job_id].as_data()
        data = forecast_data(estimate, runtime)
        moved = later.get(job_id) if later else None
        if moved:
            data["later"] = moved
        if stored.get(job_id) != data:
            rows.append((job_id, data))
    return len(update_still_pending(("forecast",), rows))


# Why a pending job has no estimated start (scheduler/band.py's codes), as one sentence.
WHY_NONE = {
    "never_fits": "It can never start as asked: no node, flavor or quota is big enough.",
    "unknown_runtime": (
        "A job in its way has no runtime and no finished job like it to predict one from."
    ),
    "beyond_horizon": "It should start later than the forecast looks ahead.",
}


def why_none_text(code: str | None) -> str | None:
    return None if code is None else WHY_NONE.get(code, code)


# What the API's `start_band` and `runtime_prediction` and the job page show, read from the
# last stored forecast: one reading, so that the page and the CLI never disagree.


def start_band_of(job: Job) -> dict[str, Any] | None:
    """While PENDING and once forecast: {early, late (ISO times, late None beyond the
    forecast's horizon), why_none (a code when there is no estimate), why_none_text,
    moved_later (how often the estimate moved later), moved_later_text (that and the last
    cause as a sentence, or None): forecasts/moves.py}."""
    forecast = job.forecast
    if job.state != JobState.PENDING or not isinstance(forecast, dict):
        return None
    why = forecast.get("why_none")
    later = forecast.get("later")
    return {
        "early": forecast.get("early"),
        "late": forecast.get("late"),
        "why_none": why,
        "why_none_text": why_none_text(why),
        "moved_later": later.get("count", 0) if isinstance(later, dict) else 0,
        "moved_later_text": later_text(later if isinstance(later, dict) else None) or None,
    }


def runtime_prediction_of(job: Job) -> dict[str, Any] | None:
    """The runtime the last forecast used ({p10, p50, p90, source, samples}) until the job
    ends; None when it had none."""
    forecast = job.forecast
    if job.state in FINAL or not isinstance(forecast, dict):
        return None
    runtime = forecast.get("runtime")
    return runtime if isinstance(runtime, dict) else None
