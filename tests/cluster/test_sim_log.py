"""The simulated worker's log, cut as Kubernetes cuts one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuqueue.cluster.base import LogQuery
from gpuqueue.cluster.sim_log import SimulatedRun, simulated_log

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RUN = SimulatedRun(7, 2, 0, 1, T0, T0 + timedelta(seconds=10), 3, prior_steps=40)


def at(seconds: float, **query: int) -> list[str]:
    return list(simulated_log(RUN, T0 + timedelta(seconds=seconds), LogQuery(**query)).lines)


def test_nothing_before_the_worker_runs_then_a_step_a_second_then_the_exit() -> None:
    assert at(-1) == []
    assert at(2.5)[0] == "worker 0 of 1: attempt 2 of job 7 started, resuming after step 40"
    assert [line.split(" loss ")[0] for line in at(2.5)[1:]] == ["step 41", "step 42"]
    assert at(60)[-1] == "worker 0 exited with code 3" and len(at(60)) == 12


def test_since_then_tail_then_the_byte_limit() -> None:
    assert [line.split(" loss ")[0] for line in at(5, since_seconds=2)] == [
        "step 43",
        "step 44",
        "step 45",
    ]
    assert at(60, since_seconds=49) == []  # it ended 50 s ago
    assert at(60, since_seconds=50)[0].startswith("step 50 ") and len(at(60, since_seconds=50)) == 2
    assert at(60, tail_lines=1) == ["worker 0 exited with code 3"]
    cut = simulated_log(RUN, T0 + timedelta(seconds=60), LogQuery(limit_bytes=80))
    assert cut.truncated and len(cut.lines) == 1
