"""The forecast's honesty as the replay measures it (gpuqueue/sim/honesty.py): the figures
docs/benchmarks.md reports, worked out by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpuqueue.scheduler.band import UNKNOWN_RUNTIME, Estimate, forecast_band
from gpuqueue.scheduler.band_misses import chosen
from gpuqueue.scheduler.model import Policy, Snapshot
from gpuqueue.sim import simulate, uniform_cluster
from gpuqueue.sim.honesty import ForecastSampler
from gpuqueue.sim.predicted import ReplayRuntimes, facts
from gpuqueue.sim.run import JobRun
from tests.scheduler import builders as b
from tests.sim.builders import EXACT, job, team


def started_at(job_id: int, start: float | None) -> JobRun:
    run = JobRun(job=job(job_id, 0, 100), remaining=100, enqueued_at=0)
    run.first_start = start
    return run


def test_the_summary_splits_estimates_into_inside_after_and_before_their_band() -> None:
    sampler = ForecastSampler(every=3600, runtimes=ReplayRuntimes(), cycle=60)
    sampler.records = [
        (0, started_at(1, 120), Estimate(100, 50, 200)),  # inside
        (0, started_at(2, 230), Estimate(100, 50, 200)),  # past the late end by under a cycle
        (0, started_at(3, 400), Estimate(100, 80, 150)),  # after
        (0, started_at(4, 300), Estimate(1000, 900, 2000)),  # before
        (0, started_at(5, 9000), Estimate(1000, 900, None)),  # a band open at its late end
        (0, started_at(6, 50), Estimate(None, why_none=UNKNOWN_RUNTIME)),  # no estimate
        (0, started_at(7, None), Estimate(100, 50, 200)),  # never started: not counted
    ]
    summary = sampler.summary()
    assert summary["forecast_jobs"] == 6
    assert summary["forecast_estimated"] == pytest.approx(5 / 6, abs=1e-4)
    assert summary["forecast_in_band"] == pytest.approx(3 / 5)
    assert summary["forecast_after_band"] == pytest.approx(1 / 5)
    assert summary["forecast_before_band"] == pytest.approx(1 / 5)
    # |likely - start| / wait: 20/120, 130/230, 300/400, 8000/9000, 700/300 in order.
    assert summary["forecast_error_median"] == pytest.approx(300 / 400)
    # (late - early) / likely wait of the closed bands: 1.5, 1.5, 0.7, 1.1.
    assert summary["forecast_band_width_median"] == pytest.approx(1.3)


def test_a_replay_with_runtimes_learnt_exactly_forecasts_every_start_it_can() -> None:
    """Four whole-node jobs of 1,000 s queue at once on one node. At the first sample nothing
    has finished: the first job starts now, the others wait on a job with no prediction. From
    then on every runtime learnt is 1,000 s, so each later sample puts each start exactly."""
    trace = [job(i, 0, 1000, gpus=8) for i in (1, 2, 3, 4)]
    config = replace(EXACT, forecast_every=1000)
    result = simulate(trace, uniform_cluster(1, 8), (team("a", 8, 8),), "gpuqueue", config)
    assert {r.job.id: r.first_start for r in result.runs} == {1: 0, 2: 1000, 3: 2000, 4: 3000}
    summary = result.summary
    # Samples at 0, 1,000, 2,000 and 3,000 s of the jobs not started yet: 4 + 3 + 2 + 1.
    assert summary["forecast_samples"] == 4
    assert summary["forecast_jobs"] == 10
    assert summary["forecast_estimated"] == pytest.approx(7 / 10)
    assert summary["forecast_in_band"] == 1.0
    assert summary["forecast_after_band"] == summary["forecast_before_band"] == 0.0
    assert summary["forecast_error_median"] == 0.0


def test_the_replay_shows_bands_stretched_by_what_its_earlier_samples_missed_by() -> None:
    """Job 1 holds the only node, its kind having run 600-1,400 s; job 2 waits. Sixty earlier
    samples of the last week started at twice their band's late end: the band shown for job 2
    is twice as wide each way, and what is learnt from is its band as forecast."""
    now = next(h * 3600.0 for h in range(1, 200) if chosen(2, h * 3600.0))
    runtimes = ReplayRuntimes()
    first, second = job(1, 0, 1000, gpus=8), job(2, 0, 1000, gpus=8)
    for runtime in (600, 800, 1000, 1200, 1400):
        runtimes.history.record(facts(first), runtime)
    runs = {1: started_at(1, now - 100), 2: JobRun(job=second, remaining=1000, enqueued_at=0)}
    runs[1].job = first
    sampler = ForecastSampler(every=3600, runtimes=runtimes)
    for i in range(60):
        at = now - 7200 - i
        sampler.misses.append((at, 1800.0, 3600.0, started_at(100 + i, at + 7200)))
    snapshot = Snapshot(
        now,
        b.nodes(1, h100=8),
        (b.team("a"),),
        (b.running(1, "a", {"n1": 1}, gpus=8, started=now - 100),),
        (b.pending(2, "a", gpus=8),),
    )
    assert sampler.due(now)
    sampler.sample(snapshot, runs, Policy())
    predictions = {i: runtimes.prediction(run) for i, run in runs.items()}
    levels = runtimes.history.band_levels()
    base = forecast_band(snapshot, predictions, Policy(), levels=levels)[2]
    assert base.likely is not None and base.early is not None and base.late is not None
    assert base.early - now < base.likely - now < base.late - now
    ((at, run, shown),) = sampler.records
    assert (at, run, shown.likely) == (now, runs[2], base.likely)
    assert shown.early - now == pytest.approx((base.early - now) / 2)
    assert shown.late - now == pytest.approx((base.late - now) * 2)
    assert sampler.misses[-1] == (now, base.early - now, base.late - now, runs[2])
    assert len(sampler.misses) == 61
    assert math.isfinite(shown.late)
