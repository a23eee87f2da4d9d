"""An estimated start with a band, from predicted runtimes (prediction.py).

`forecast` (forecast.py) needs a runtime for every job in the way, and users rarely give one.
With predictions from history every job has a distribution: the forecast is run with each
job's median runtime for the most likely start (a declared expected runtime is kept as given),
and the band (10th to 90th percentile) widens the wait by the spread of those distributions
(`forecast_band`), read at the levels where the runtimes finished so far actually fell 10 %
and 90 % of the time (prediction.py, `RuntimeHistory.calibrated`). What is shown is that band
stretched or shrunk by how far such bands missed the starts of the last week
(band_misses.py). A declared runtime is widened too, by how far the runtimes of jobs that
declared one fell from it (`RuntimeHistory.declared_spread`), and a band is never narrower than
an admission cycle on either side of its most likely start (`at_least_a_cycle`): starts fall on
the cycle's grid, and a band that is one instant is missed by any start a cycle late. A job with
no start gets the reason why, as a code:

| why_none        | meaning                                                              |
| --------------- | -------------------------------------------------------------------- |
| never_fits      | no node or the flavor, or no quota, is big enough (never.py)        |
| unknown_runtime | a job in the way has neither a runtime nor a prediction             |
| beyond_horizon  | later than the forecast's horizon (its number of engine cycles)     |
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from gpuqueue.scheduler.forecast import forecast
from gpuqueue.scheduler.model import PendingJob, Policy, RunningJob, Snapshot
from gpuqueue.scheduler.never import never_admitted
from gpuqueue.scheduler.prediction import DECLARED_PRIOR, HIGH, LOW, MEDIAN, Prediction

# Seconds: one admission cycle, the least a band reaches on either side of its most likely start.
CYCLE = 60.0
NEVER_FITS = "never_fits"
UNKNOWN_RUNTIME = "unknown_runtime"
BEYOND_HORIZON = "beyond_horizon"


@dataclass(frozen=True, slots=True)
class Estimate:
    """Virtual or epoch seconds; `likely` None comes with `why_none`. `late` None with a likely
    time: the band's late end lies beyond the horizon."""

    likely: float | None
    early: float | None = None
    late: float | None = None
    why_none: str | None = None


def with_runtimes(snapshot: Snapshot, predictions: Mapping[int, Prediction], q: float) -> Snapshot:
    """The snapshot with each job's predicted runtime at quantile `q` where it has none: the
    whole runtime of a pending job; for a running job the time it has run plus the q-quantile
    of what is left given that (`Prediction.remaining`)."""
    now = snapshot.now
    pending = tuple(
        replace(job, expected_runtime=predictions[job.id].quantile(q), runtime_predicted=True)
        if job.expected_runtime is None and job.id in predictions
        else job
        for job in snapshot.pending
    )
    running = []
    for job in snapshot.running:
        prediction = predictions.get(job.id)
        if job.expected_runtime is None and prediction is not None:
            ran = max(now - job.started_at, 0.0)
            job = replace(job, expected_runtime=ran + prediction.remaining(ran, q))
        running.append(job)
    return replace(snapshot, pending=pending, running=tuple(running))


def spread(
    snapshot: Snapshot,
    predictions: Mapping[int, Prediction],
    levels: tuple[float, float] = (LOW, HIGH),
    declared: tuple[float, float] = DECLARED_PRIOR,
) -> dict[str, tuple[float, float]]:
    """Per flavor, how much shorter and longer than their medians the runtimes of the jobs
    there may be: the GPU-weighted median over its jobs of (10th percentile / median) and of
    (90th percentile / median), each percentile read at its calibrated level in `levels`
    (`RuntimeHistory.calibrated`); for a job that declared its runtime, `declared` (the
    actual over the declared runtime at those levels: `RuntimeHistory.declared_spread`).
    (1, 1) for a flavor with neither."""
    low, high = levels
    ratios: dict[str, list[_Ratios]] = {}
    for job in _jobs(snapshot):
        if job.expected_runtime is not None and job.id not in predictions:
            ratios.setdefault(job.flavor, []).append(_Ratios(*declared, job.gpus))
            continue
        prediction = predictions.get(job.id)
        if prediction is None or job.expected_runtime is not None:
            continue
        median = prediction.quantile(MEDIAN)
        if median <= 0:
            continue
        ratios.setdefault(job.flavor, []).append(
            _Ratios(prediction.quantile(low) / median, prediction.quantile(high) / median, job.gpus)
        )
    return {
        flavor: (_weighted_median(r, _low), _weighted_median(r, _high))
        for flavor, r in ratios.items()
    }


class _Ratios(NamedTuple):
    """One job's percentiles over its median, weighted by its GPUs."""

    low: float
    high: float
    gpus: int


def _low(ratios: _Ratios) -> float:
    return ratios.low


def _high(ratios: _Ratios) -> float:
    return ratios.high


def _jobs(snapshot: Snapshot) -> Iterator[RunningJob | PendingJob]:
    yield from snapshot.running
    yield from snapshot.pending


def _weighted_median(rows: list[_Ratios], ratio: Callable[[_Ratios], float]) -> float:
    ordered = sorted(rows, key=ratio)
    half = sum(r.gpus for r in ordered) / 2
    seen = 0
    for row in ordered:
        seen += row.gpus
        if seen >= half:
            return ratio(row)
    return 1.0


def forecast_band(
    snapshot: Snapshot,
    predictions: Mapping[int, Prediction],
    policy: Policy | None = None,
    *,
    max_steps: int = 200,
    precision: float = 0.1,
    levels: tuple[float, float] = (LOW, HIGH),
    declared: tuple[float, float] = DECLARED_PRIOR,
) -> dict[int, Estimate]:
    """An Estimate per pending job.

    1. The forecast with every job's median runtime (a declared one is kept) gives the most
       likely start: the wait W from now.
    2. The band scales W by its flavor's `spread`: if the jobs in the way run to their 10th
       percentiles the wait shrinks about as much, to their 90th it grows about as much. (Three
       forecasts, one per quantile, cost three times as much: 10 s of CPU at 5,000 pending.)
       The percentiles are read at `levels`, the history's calibrated 10th and 90th
       (`RuntimeHistory.calibrated`): where runtimes drift past their history, wider.
       A declared runtime spreads by `declared` (`spread`).
    3. The band reaches at least a cycle either side of the most likely start.
    4. A job with no likely start gets why.
    """
    policy = policy or Policy()
    now = snapshot.now
    likely_by_id = forecast(
        with_runtimes(snapshot, predictions, MEDIAN),
        policy,
        max_steps=max_steps,
        precision=precision,
    )
    missing = None in likely_by_id.values()  # only then is there a why to find
    never = never_admitted(snapshot) if missing else frozenset()
    unknown = missing and any(
        j.expected_runtime is None and j.max_runtime is None and j.id not in predictions
        for j in _jobs(snapshot)
    )
    ratios = spread(snapshot, predictions, levels, declared)
    flavors = {job.id: job.flavor for job in snapshot.pending}
    out: dict[int, Estimate] = {}
    for job_id, likely in likely_by_id.items():
        if likely is None or not math.isfinite(likely):
            why = NEVER_FITS if job_id in never else UNKNOWN_RUNTIME if unknown else BEYOND_HORIZON
            out[job_id] = Estimate(None, why_none=why)
            continue
        low, high = ratios.get(flavors[job_id], (1.0, 1.0))
        wait = max(likely - now, 0.0)
        band = Estimate(likely, now + wait * min(low, 1.0), now + wait * max(high, 1.0))
        out[job_id] = at_least_a_cycle(band, now)
    return out


def at_least_a_cycle(estimate: Estimate, now: float) -> Estimate:
    """The band widened to reach at least CYCLE before (not before `now`) and after its most
    likely start: never a single instant."""
    likely, early, late = estimate.likely, estimate.early, estimate.late
    if likely is None or early is None:
        return estimate
    early = min(early, max(now, likely - CYCLE))
    if late is not None:
        late = max(late, likely + CYCLE)
    return Estimate(likely, early, late, estimate.why_none)
