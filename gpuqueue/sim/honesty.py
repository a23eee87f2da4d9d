"""How honest the estimated start is, measured in a replay.

At every sample time (hourly by default) the forecast with its band (gpuqueue/scheduler/band.py)
is run on the replay's snapshot, with the predictions the replay has then, as the service would
run it, and the band is stretched by what the earlier samples' bands missed by
(gpuqueue/scheduler/band_misses.py, from the jobs `chosen` there, as the service keeps them);
each pending job's most likely start and band are kept. At the end, for the jobs that
then started, the summary gives:

- `forecast_estimated`: the share of sampled pending jobs that had an estimate;
- `forecast_in_band`: of the estimates, the share whose job started inside its band (the band's
  ends are widened by one admission cycle: starts fall on the cycle grid); the others split into
  `forecast_after_band` (started later than the band's late end: the usual miss at high load)
  and `forecast_before_band`;
- `forecast_error_median`: the median of |most likely start - actual start| / actual wait from
  the sample (a wait of under one cycle counts as one cycle);
- `forecast_band_width_median`: the median width of a closed band relative to its most likely
  wait (late - early) / (likely - sample), the price of being inside it;
- `forecast_samples` and `forecast_seconds` (CPU time spent forecasting, not counted in the
  replay's plan time).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import replace

from gpuqueue.scheduler.band import Estimate, forecast_band
from gpuqueue.scheduler.band_misses import WINDOW, BandSample, kept, widen, widening
from gpuqueue.scheduler.model import Policy, Snapshot
from gpuqueue.scheduler.prediction import Prediction
from gpuqueue.sim.predicted import ReplayRuntimes
from gpuqueue.sim.run import JobRun


class ForecastSampler:
    def __init__(self, every: float, runtimes: ReplayRuntimes, cycle: float = 60.0) -> None:
        self.every = every
        self.runtimes = runtimes
        self.cycle = cycle
        self.next_at: float | None = None
        # (sample time, run, estimate) for each pending job never started before the sample.
        self.records: list[tuple[float, JobRun, Estimate]] = []
        # What the band is stretched by learns from: (sample time, band's waits, run) of the
        # `chosen` jobs, the band before the stretch, the last week's.
        self.misses: deque[tuple[float, float, float, JobRun]] = deque()
        self.samples = 0
        self.seconds = 0.0

    def due(self, now: float) -> bool:
        if self.next_at is None:
            self.next_at = now
        return now >= self.next_at

    def sample(self, snapshot: Snapshot, runs: dict[int, JobRun], policy: Policy) -> None:
        """Forecast `snapshot` as the service would see it: declared runtimes only (the replay
        has none), predictions from the jobs finished so far."""
        started = time.process_time()
        assert self.next_at is not None
        while self.next_at <= snapshot.now:
            self.next_at += self.every
        predictions: dict[int, Prediction] = {}
        for job_id, run in runs.items():
            prediction = self.runtimes.prediction(run)
            if prediction is not None:
                predictions[job_id] = prediction
        bare = replace(
            snapshot,
            pending=tuple(
                replace(j, expected_runtime=None, runtime_predicted=False) for j in snapshot.pending
            ),
            running=tuple(replace(j, expected_runtime=None) for j in snapshot.running),
        )
        levels = self.runtimes.history.band_levels()
        now = snapshot.now
        declared = self.runtimes.history.declared_spread(levels)
        estimates = forecast_band(bare, predictions, policy, levels=levels, declared=declared)
        by = widening(self._learnt_from(now), now)
        waiting = {
            j.id: estimates[j.id] for j in snapshot.pending if runs[j.id].first_start is None
        }
        for job_id, estimate in waiting.items():
            self.records.append((now, runs[job_id], widen(estimate, now, by)))
        for job_id, (early, late) in kept(waiting, now).items():
            self.misses.append((now, early, late, runs[job_id]))
        self.samples += 1
        self.seconds += time.process_time() - started

    def _learnt_from(self, now: float) -> list[BandSample]:
        misses = self.misses
        while misses and misses[0][0] < now - WINDOW:
            misses.popleft()
        return [BandSample(at, early, late, run.first_start) for at, early, late, run in misses]

    def summary(self) -> dict[str, float]:
        started = [(at, run, e) for at, run, e in self.records if run.first_start is not None]
        with_estimate = [(at, run, e) for at, run, e in started if e.likely is not None]
        after = before = 0
        errors: list[float] = []
        widths: list[float] = []
        for at, run, e in with_estimate:
            start = run.first_start
            assert start is not None and e.likely is not None and e.early is not None
            late = e.late if e.late is not None else float("inf")
            if start > late + self.cycle:
                after += 1
            elif start < e.early - self.cycle:
                before += 1
            errors.append(abs(e.likely - start) / max(start - at, self.cycle))
            if e.late is not None:
                widths.append((e.late - e.early) / max(e.likely - at, self.cycle))
        estimated = max(len(with_estimate), 1)
        return {
            "forecast_samples": self.samples,
            "forecast_jobs": len(started),
            "forecast_estimated": round(len(with_estimate) / max(len(started), 1), 4),
            "forecast_in_band": round((len(with_estimate) - after - before) / estimated, 4),
            "forecast_after_band": round(after / estimated, 4),
            "forecast_before_band": round(before / estimated, 4),
            "forecast_error_median": round(statistics.median(errors), 4) if errors else 0.0,
            "forecast_band_width_median": round(statistics.median(widths), 4) if widths else 0.0,
            "forecast_seconds": round(self.seconds, 2),
        }
