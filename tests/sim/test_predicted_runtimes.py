"""What a replay's policies know of runtimes (gpuqueue/sim/predicted.py): only jobs finished
before the question, as the service would know them."""

from __future__ import annotations

from gpuqueue.sim.predicted import DEFAULT_RUNTIME, ReplayRuntimes
from gpuqueue.sim.run import JobRun
from tests.sim.builders import job


def run_of(job_id: int, runs: float, at: float = 0.0) -> JobRun:
    return JobRun(job=job(job_id, at, runs), remaining=runs, enqueued_at=at)


def test_a_prediction_sees_only_jobs_finished_before_it_was_made() -> None:
    runtimes = ReplayRuntimes()
    early = run_of(2, 5000.0)
    assert runtimes.remaining(early) == DEFAULT_RUNTIME  # nothing has finished yet
    runtimes.finished(run_of(1, 10.0))
    later = run_of(3, 5000.0)
    assert runtimes.remaining(later) == 10.0
    runtimes.finished(run_of(4, 1000.0))
    # Made when job 3 first asked, it does not learn from job 4 (which finished after).
    assert runtimes.remaining(later) == 10.0
    assert runtimes.remaining(run_of(5, 1.0)) == 505.0  # median of 10 and 1000


def test_a_running_job_that_outlives_its_prediction_gets_a_longer_one() -> None:
    runtimes = ReplayRuntimes()
    for i, r in enumerate((100.0, 200.0, 300.0)):
        runtimes.finished(run_of(10 + i, r))
    run = run_of(1, 10_000.0)
    run.started_at = 0.0
    assert runtimes.started(run, 0.0) == 200.0
    assert runtimes.overdue(150.0, {1: run}) == []
    [(again, runtime)] = runtimes.overdue(250.0, {1: run})
    assert again is run and runtime == 250.0 + 50.0  # only the 300 s job ran this long
    # Past every runtime seen: as long again as it has run (the median of a Pareto tail).
    [(_, runtime)] = runtimes.overdue(400.0, {1: run})
    assert runtime == 800.0
