"""Invariants of every replay: GPU-time is conserved, no GPU is used twice, same seed same run."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest

from gpuqueue.scheduler.model import Policy
from gpuqueue.sim import (
    POLICIES,
    Result,
    SimConfig,
    proportional_quotas,
    simulate,
    uniform_cluster,
)
from gpuqueue.sim.traces import synthetic_jobs

CLUSTER = uniform_cluster(4, 8)
CONFIG = SimConfig(record_segments=True, checkpoint_interval=600.0)


def replay(policy: str, seed: int = 7, count: int = 300) -> Result:
    if policy == "gpuqueue":
        pytest.importorskip("gpuqueue.scheduler")
    jobs = synthetic_jobs(count, seed=seed, mean_interarrival=90.0)
    return simulate(jobs, CLUSTER, proportional_quotas(jobs, CLUSTER), policy, CONFIG)


@pytest.mark.parametrize("policy", POLICIES)
def test_gpu_time_held_is_work_done_plus_work_lost_plus_gangs_waiting(policy: str) -> None:
    result = replay(policy)
    held = sum(s.gpus * (s.end - s.start) for s in result.segments)
    done = sum(r.job.gpu_seconds for r in result.runs if r.finished_at is not None)
    lost = sum(r.lost_gpu_seconds for r in result.runs)
    idle = result.summary["gpu_hours_idle_in_gangs"] * 3600  # type: ignore[operator]
    assert result.summary["jobs_finished"] == len(result.runs)
    assert held == pytest.approx(done + lost + idle, rel=1e-9)
    assert result.summary["gpu_hours_held"] * 3600 == pytest.approx(held, rel=1e-9)  # type: ignore[operator]


@pytest.mark.parametrize("policy", POLICIES)
def test_no_node_ever_holds_more_gpus_than_it_has(policy: str) -> None:
    """Counts per node bound GPU identity: segments on a node can be given distinct GPUs
    (interval colouring) exactly when their sum never passes the node's capacity."""
    result = replay(policy)
    by_node: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for s in result.segments:
        by_node[s.node].append((s.start, s.gpus))
        by_node[s.node].append((s.end, -s.gpus))
    capacity = {n.name: n.gpus for n in CLUSTER.nodes}
    for node, changes in by_node.items():
        in_use = 0
        for _, delta in sorted(changes, key=lambda c: (c[0], c[1])):  # releases first
            in_use += delta
            assert 0 <= in_use <= capacity[node], node


@pytest.mark.parametrize("policy", POLICIES)
def test_the_same_seed_replays_the_same_way(policy: str) -> None:
    a, b = replay(policy, seed=3), replay(policy, seed=3)
    starts_a = [(r.job.id, r.first_start, r.finished_at) for r in a.runs]
    assert starts_a == [(r.job.id, r.first_start, r.finished_at) for r in b.runs]
    volatile = {"wall_s", "plan_seconds_total", "plan_ms_mean", "plan_ms_max"}
    assert {k: v for k, v in a.summary.items() if k not in volatile} == {
        k: v for k, v in b.summary.items() if k not in volatile
    }
    other = replay(policy, seed=4)
    assert [r.first_start for r in other.runs] != [r.first_start for r in a.runs]


def test_gpuqueue_never_places_half_a_gang_nor_passes_a_limit() -> None:
    result = replay("gpuqueue", count=400)
    assert result.summary["jobs_held_incomplete"] == 0
    assert "half_placed_gang" not in result.anomalies
    assert "over_limit" not in result.anomalies


def test_a_window_on_the_engine_snapshot_changes_no_decision() -> None:
    pytest.importorskip("gpuqueue.scheduler")
    jobs = synthetic_jobs(300, seed=11, mean_interarrival=40.0)
    teams = proportional_quotas(jobs, CLUSTER)
    full = simulate(jobs, CLUSTER, teams, "gpuqueue", SimConfig(window=None))
    windowed = simulate(jobs, CLUSTER, teams, "gpuqueue", SimConfig(window=16))
    assert [r.first_start for r in windowed.runs] == [r.first_start for r in full.runs]
    assert windowed.summary["snapshot_pending_max"] < full.summary["snapshot_pending_max"]


def test_the_window_shows_a_small_job_queued_behind_its_teams_gangs() -> None:
    """A team's first jobs by turn are gangs bigger than any free room; its one-GPU job behind
    them starts as soon as a GPU is free, as it does with no window at all (a window by turn
    alone hid it until a gang could start)."""
    pytest.importorskip("gpuqueue.scheduler")
    from tests.sim.builders import EXACT, job, team

    cluster = uniform_cluster(2, 8)
    teams = [team("a", 8, 16), team("b", 8, 16)]
    # a and b hold a GPU each for 100 h: no 16-GPU gang of a's can start before.
    jobs = [job(1, 0.0, 360_000.0), job(2, 0.0, 360_000.0, team="b")]
    jobs += [job(10 + i, 10.0 + i, 3600.0, gpus=8, workers=2) for i in range(20)]
    jobs.append(job(99, 60.0, 3600.0))
    # The starvation guard off (and a holds GPUs, so its oldest gang is not put first either):
    # a reservation would decide the small job's fate instead.
    config = replace(EXACT, engine_policy=Policy(starvation_seconds=1e12))
    full = simulate(jobs, cluster, teams, "gpuqueue", replace(config, window=None))
    windowed = simulate(jobs, cluster, teams, "gpuqueue", replace(config, window=16))
    start = {r.job.id: r.first_start for r in windowed.runs}
    assert start[99] == 60.0
    assert start == {r.job.id: r.first_start for r in full.runs}


def test_every_plan_of_the_replay_is_the_plan_of_the_engine_with_every_memo_off() -> None:
    """The replay calls `plan(snapshot, policy, explain=False)`: the admission cycle's
    decisions without the reasons, which a replay never reads. Planning each of its snapshots
    with every memo off gives the same plan, and the full plan the same decisions (with
    snapshots bigger than the window: the demand of a team is extended to cover its fair
    share)."""
    pytest.importorskip("gpuqueue.scheduler")
    from gpuqueue.scheduler import plan
    from gpuqueue.scheduler.engine import Cycle
    from gpuqueue.scheduler.model import Plan, Snapshot
    from gpuqueue.sim.policies import make_policy
    from gpuqueue.sim.policies.gpuqueue import GpuqueueEngine

    jobs = synthetic_jobs(300, seed=5, mean_interarrival=40.0)
    teams = proportional_quotas(jobs, CLUSTER)
    compared: list[int] = []

    def both(snapshot: Snapshot, policy: Policy | None = None, *, explain: bool = True) -> Plan:
        assert policy is not None and not explain
        result = plan(snapshot, policy, explain=explain)
        assert Cycle(snapshot, policy, memo=False, explain=explain).run() == result
        full = plan(snapshot, policy)
        assert (full.admissions, full.preemptions, full.fair_shares) == (
            result.admissions,
            result.preemptions,
            result.fair_shares,
        )
        compared.append(len(snapshot.pending))
        return result

    def engine(ledger: object) -> GpuqueueEngine:
        policy = make_policy("gpuqueue", ledger, CLUSTER, teams, window=16)  # type: ignore[arg-type]
        assert isinstance(policy, GpuqueueEngine)
        policy._plan = both
        return policy

    result = simulate(jobs, CLUSTER, teams, engine, SimConfig())
    assert result.summary["jobs_finished"] == len(jobs)
    assert len(compared) == result.summary["plans"] and max(compared) > 16
