"""The forecast's honesty as the replay measures it (gpuqueue/sim/honesty.py): the figures
docs/benchmarks.md reports, worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuqueue.scheduler.band import UNKNOWN_RUNTIME, Estimate
from gpuqueue.sim import simulate, uniform_cluster
from gpuqueue.sim.honesty import ForecastSampler
from gpuqueue.sim.predicted import ReplayRuntimes
from gpuqueue.sim.run import JobRun
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
