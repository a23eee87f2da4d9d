"""What a replay's policies know of runtimes (gpuqueue/sim/predicted.py): only jobs finished
before the question, as the service would know them."""

from __future__ import annotations

import pytest

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.model import Plan, Policy, Snapshot
from gpuqueue.scheduler.prediction import release_level
from gpuqueue.sim import simulate, uniform_cluster
from gpuqueue.sim.policies import make_policy
from gpuqueue.sim.policies.gpuqueue import GpuqueueEngine
from gpuqueue.sim.predicted import DEFAULT_RUNTIME, ReplayRuntimes
from gpuqueue.sim.run import JobRun
from tests.sim.builders import EXACT, job, team


def run_of(job_id: int, runs: float, at: float = 0.0) -> JobRun:
    return JobRun(job=job(job_id, at, runs), remaining=runs, enqueued_at=at)


def test_a_prediction_is_what_the_jobs_finished_so_far_say_now() -> None:
    """As in the service, which reads its history again about once a cycle: a job asked again
    after another job finished learns from it (its prediction was not frozen when first made)."""
    runtimes = ReplayRuntimes()
    early = run_of(2, 5000.0)
    assert runtimes.remaining(early) == DEFAULT_RUNTIME  # nothing has finished yet
    runtimes.finished(run_of(1, 10.0))
    assert runtimes.remaining(early) == 10.0
    runtimes.finished(run_of(4, 1000.0))
    assert runtimes.remaining(early) == 505.0  # the median of 10 and 1000


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


def test_a_job_starts_with_what_the_jobs_finished_while_it_waited_say() -> None:
    """Two one-GPU nodes, held by team a's jobs 1 and 2 from the start. Job 3 waits, then
    starts when job 1 ends after 100 s. Job 4 waits from 110 s, when the history says 100 s,
    and starts when job 3 ends after 5000 s: predicted at 2550 s (the median of both), as the
    live cycle would after reading its history again, not at the 100 s it was queued with.
    (Team b's job, entitled to a GPU, asks for the plan that shows it running.)"""
    cluster = uniform_cluster(2, 1)
    teams = [team("a", 1, 2), team("b", 1, 2)]
    jobs = [job(1, 0.0, 100.0), job(2, 0.0, 50_000.0), job(3, 50.0, 5000.0)]
    jobs += [job(4, 110.0, 1000.0), job(5, 5500.0, 100.0, team="b")]
    running: dict[float, dict[int, float | None]] = {}

    def recording(
        snapshot: Snapshot, policy: Policy | None = None, *, explain: bool = True
    ) -> Plan:
        running[snapshot.now] = {j.id: j.expected_runtime for j in snapshot.running}
        return plan(snapshot, policy, explain=explain)

    def engine(ledger: object) -> GpuqueueEngine:
        policy = make_policy("gpuqueue", ledger, cluster, teams, window=16)  # type: ignore[arg-type]
        assert isinstance(policy, GpuqueueEngine)
        policy._plan = recording
        return policy

    simulate(jobs, cluster, teams, engine, EXACT)
    assert running[100.0] == {2: DEFAULT_RUNTIME}
    assert running[5500.0][4] == 2550.0


def test_a_running_job_is_released_when_a_node_of_its_like_frees() -> None:
    """The engine reads a running job's end as the service gives it (release_level): a
    one-GPU job on an 8-GPU node at the 92nd percentile of its prediction (a node of eight
    such jobs frees when the last ends), an 8-GPU job at the median. One-GPU jobs ran 100,
    200 and 300 s; job 4 starts at 1000 s and is seen running at 1100 s."""
    cluster = uniform_cluster(2, 8)
    teams = [team("a", 16, 16)]
    jobs = [job(1, 0.0, 100.0), job(2, 0.0, 200.0), job(3, 0.0, 300.0)]
    jobs += [job(4, 1000.0, 5000.0), job(5, 1000.0, 5000.0, gpus=8), job(6, 1100.0, 10.0)]
    running: dict[float, dict[int, float | None]] = {}

    def recording(
        snapshot: Snapshot, policy: Policy | None = None, *, explain: bool = True
    ) -> Plan:
        running[snapshot.now] = {j.id: j.expected_runtime for j in snapshot.running}
        return plan(snapshot, policy, explain=explain)

    def engine(ledger: object) -> GpuqueueEngine:
        policy = make_policy("gpuqueue", ledger, cluster, teams, window=16)  # type: ignore[arg-type]
        assert isinstance(policy, GpuqueueEngine)
        policy._plan = recording
        return policy

    simulate(jobs, cluster, teams, engine, EXACT)
    level = release_level(1, 8)
    assert level == pytest.approx(0.917, abs=0.001)
    assert running[1100.0][4] == pytest.approx(200.0 + (level * 2 - 1) * 100.0)
    assert running[1100.0][5] == DEFAULT_RUNTIME  # no 8-GPU job has finished: an hour
