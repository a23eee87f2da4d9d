"""Each policy on tiny traces whose outcome is worked out by hand in the test's name."""

from __future__ import annotations

import pytest

from gpuqueue.sim import simulate, uniform_cluster
from tests.sim.builders import EXACT, job, team


def starts(result: object) -> dict[int, float | None]:
    return {r.job.id: r.first_start for r in result.runs}  # type: ignore[attr-defined]


# One node of 8: A holds 4 until 100; B (8 GPUs) arrives at 1; C (4 GPUs, 50 s) at 2.
HEAD_OF_LINE = [job(1, 0, 100, gpus=4), job(2, 1, 100, gpus=8), job(3, 2, 50, gpus=4)]
ONE_NODE = uniform_cluster(1, 8)
OPEN_TEAM = (team("a", guarantee=8, limit=8),)


def test_strict_fifo_keeps_a_small_job_behind_the_head_that_does_not_fit() -> None:
    result = simulate(HEAD_OF_LINE, ONE_NODE, OPEN_TEAM, "fifo", EXACT)
    assert starts(result) == {1: 0, 2: 100, 3: 200}


def test_backfill_lets_the_small_job_pass_the_head_while_it_waits() -> None:
    result = simulate(HEAD_OF_LINE, ONE_NODE, OPEN_TEAM, "backfill", EXACT)
    assert starts(result) == {1: 0, 2: 100, 3: 2}


def test_gpuqueue_admits_the_small_job_that_fits_whole_and_the_gang_when_the_node_drains() -> None:
    pytest.importorskip("gpuqueue.scheduler")
    result = simulate(HEAD_OF_LINE, ONE_NODE, OPEN_TEAM, "gpuqueue", EXACT)
    assert starts(result) == {1: 0, 2: 100, 3: 2}
    assert result.anomalies == {}


# Two nodes of 4. X (1 GPU) takes node 0 at 0 until 100; gang G (2 × 4 GPUs, 50 s) at 1;
# Y (1 GPU) at 2 until 102. G needs both nodes whole: only at 102 is node 0 empty again.
HALF_PLACED = [job(1, 0, 100), job(2, 1, 50, gpus=4, workers=2), job(3, 2, 100)]
TWO_NODES = uniform_cluster(2, 4)


def test_pod_by_pod_holds_half_a_gang_idle_until_the_last_pod_fits() -> None:
    result = simulate(HALF_PLACED, TWO_NODES, OPEN_TEAM, "pod-by-pod", EXACT)
    assert starts(result) == {1: 0, 2: 102, 3: 2}
    # G's first pod sat on node 1's 4 GPUs from 1 to 102.
    assert result.summary["gpu_hours_idle_in_gangs"] == pytest.approx(4 * 101 / 3600)
    assert result.summary["jobs_held_incomplete"] == 1


@pytest.mark.parametrize("policy", ["fifo", "backfill", "gpuqueue"])
def test_gang_policies_hold_nothing_for_a_gang_that_does_not_fit_whole(policy: str) -> None:
    if policy == "gpuqueue":
        pytest.importorskip("gpuqueue.scheduler")
    result = simulate(HALF_PLACED, TWO_NODES, OPEN_TEAM, policy, EXACT)
    assert result.summary["gpu_hours_idle_in_gangs"] == 0
    assert result.summary["jobs_held_incomplete"] == 0
    assert "half_placed_gang" not in result.anomalies
    assert starts(result)[2] == (102 if policy != "fifo" else 100)


def test_pod_by_pod_lets_a_gang_too_big_for_the_cluster_hold_every_gpu_for_ever() -> None:
    # A gang of 3 × 4 on two nodes of 4 places two pods and waits for a third node that does
    # not exist; the 1-GPU job behind it never runs and the replay ends.
    jobs = [job(1, 0, 50, gpus=4, workers=3), job(2, 1, 10)]
    result = simulate(jobs, TWO_NODES, OPEN_TEAM, "pod-by-pod", EXACT)
    assert starts(result) == {1: None, 2: None}
    assert result.summary["jobs_held_incomplete"] == 1


def test_gang_policies_skip_a_gang_too_big_for_the_cluster_and_run_the_rest() -> None:
    jobs = [job(1, 0, 50, gpus=4, workers=3), job(2, 1, 10)]
    result = simulate(jobs, TWO_NODES, OPEN_TEAM, "backfill", EXACT)
    assert starts(result) == {1: None, 2: 1}


def test_gpuqueue_reclaims_borrowed_gpus_for_a_team_under_its_guarantee() -> None:
    """The morning grab: team a borrows the whole node with 8 single-GPU jobs; team b, whose
    guarantee is the node, submits an 8-GPU job at 1000 and starts once a's jobs have
    checkpointed (grace 60 s); a's jobs lose the 1000 s since their start (no save yet)."""
    pytest.importorskip("gpuqueue.scheduler")
    jobs = [job(i, 0, 10_000, team="a") for i in range(8)] + [job(8, 1000, 500, gpus=8, team="b")]
    teams = (team("a", guarantee=0, limit=8), team("b", guarantee=8, limit=8))
    result = simulate(jobs, ONE_NODE, teams, "gpuqueue", EXACT)
    assert starts(result)[8] == 1060
    assert result.summary["preemptions"] == 8
    assert result.summary["gpu_hours_lost"] == pytest.approx(8 * 1060 / 3600)
    assert result.anomalies == {}


def test_the_replay_tells_the_engine_whom_each_victim_was_preempted_for() -> None:
    """As the live cycle does (from the preemption's event): the jobs of team a being preempted
    for team b's job are promised to it in the next plans, while they save their checkpoint."""
    pytest.importorskip("gpuqueue.scheduler")
    from gpuqueue.scheduler import plan
    from gpuqueue.scheduler.model import Plan, Policy, Snapshot
    from gpuqueue.sim.policies import make_policy
    from gpuqueue.sim.policies.gpuqueue import GpuqueueEngine

    # Job 9 arrives while they save: a plan runs then.
    jobs = [job(i, 0, 10_000, team="a") for i in range(8)] + [
        job(8, 1000, 500, gpus=8, team="b"),
        job(9, 1030, 500, team="b"),
    ]
    teams = (team("a", guarantee=0, limit=8), team("b", guarantee=8, limit=8))
    leaving: list[set[tuple[int, int | None]]] = []

    def spy(snapshot: Snapshot, policy: Policy, *, explain: bool = True) -> Plan:
        leaving.append(
            {(r.id, r.preempted_for) for r in snapshot.running if r.preempting_since is not None}
        )
        return plan(snapshot, policy, explain=explain)

    def engine(ledger: object) -> GpuqueueEngine:
        policy = make_policy("gpuqueue", ledger, ONE_NODE, teams)  # type: ignore[arg-type]
        assert isinstance(policy, GpuqueueEngine)
        policy._plan = spy
        return policy

    result = simulate(jobs, ONE_NODE, teams, engine, EXACT)
    assert starts(result)[8] == 1060
    assert {(i, 8) for i in range(8)} in leaving
