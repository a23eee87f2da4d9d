"""The replay's delay figures, on tiny traces worked out by hand."""

from __future__ import annotations

import pytest

from gpuqueue.sim import simulate, uniform_cluster
from tests.sim.builders import EXACT, job, team

# One node of 8 under strict FIFO. A (8 GPUs, 100 s) runs at 0; B and C (1 GPU, 10 s) arrive
# at 1 and 2 and start at 100; D (8 GPUs, 100 s) arrives at 3 and starts when they leave, at 110.
JOBS = [job(1, 0, 100, gpus=8), job(2, 1, 10), job(3, 2, 10), job(4, 3, 100, gpus=8)]


def test_the_work_weighted_mean_counts_each_job_by_its_gpu_time() -> None:
    result = simulate(JOBS, uniform_cluster(1, 8), (team("a", 8, 8),), "fifo", EXACT)
    delays = {r.job.id: r.first_start - r.job.submitted_at for r in result.runs}
    assert delays == {1: 0, 2: 99, 3: 98, 4: 107}
    s = result.summary
    # Per job: (0 + 99 + 98 + 107) / 4. By GPU-time, A and D weigh 800 GPU-s, B and C 10.
    assert s["delay_mean_s"] == pytest.approx(76.0)
    assert s["delay_work_weighted_mean_s"] == pytest.approx(
        (0 * 800 + 99 * 10 + 98 * 10 + 107 * 800) / 1620
    )
    assert s["delay_mean_by_shape_s"] == {"one_gpu": pytest.approx(98.5), "one_worker": 53.5}


def test_a_gang_has_its_own_shape_and_an_empty_replay_weighs_nothing() -> None:
    jobs = [job(1, 0, 100, gpus=4, workers=2), job(2, 0, 50)]
    result = simulate(jobs, uniform_cluster(2, 4), (team("a", 8, 8),), "fifo", EXACT)
    # The gang takes both nodes at 0; the one-GPU job waits for it until 100.
    assert result.summary["delay_mean_by_shape_s"] == {"gang": 0, "one_gpu": 100}
    assert result.summary["delay_work_weighted_mean_s"] == pytest.approx(100 * 50 / (800 + 50))
    empty = simulate([], uniform_cluster(1, 8), (team("a", 8, 8),), "fifo", EXACT)
    assert empty.summary["delay_work_weighted_mean_s"] == 0
    assert empty.summary["delay_mean_by_shape_s"] == {}
