"""Guarantees hold for fractional and model-bound jobs too: such a job within its team's
guarantee reclaims whole-GPU borrowed work on nodes it may use, claims what comes back and starts
there once it is free; beyond its guarantee it only waits. Examples, then an invariant
(Hypothesis): whatever the borrowers' layout, a fraction or a model-bound gang within its
guarantee either starts or names victims whose GPUs, once free, start it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.model import PendingJob, Plan, ReasonCode, RunningJob, Snapshot
from tests.scheduler.builders import HOUR, NOW, pending, running, team
from tests.scheduler.test_shared_gpus import _fields, frac, gpu_node, snap


def borrowers(layout: dict[str, int], first_id: int = 100) -> tuple[RunningJob, ...]:
    """Team a's one-GPU jobs filling each node of `layout` (node -> GPUs), started an hour ago."""
    jobs = []
    next_id = first_id
    for node, gpus in layout.items():
        for _ in range(gpus):
            jobs.append(running(next_id, "a", {node: 1}, started=NOW - HOUR))
            next_id += 1
    return tuple(jobs)


def bound(id: int, team_id: str, models: tuple[str, ...], **kw: object) -> PendingJob:
    return PendingJob(**{**_fields(pending(id, team_id, **kw)), "gpu_models": models})  # type: ignore[arg-type]


TEAMS = (team("a", guarantee=0, limit=100), team("b", guarantee=2, limit=100))


def after_victims_leave(snapshot: Snapshot, result: Plan) -> Snapshot:
    """The next cycle once the plan's victims have stopped and their GPUs are free."""
    gone = {p.job_id for p in result.preemptions}
    return replace(snapshot, running=tuple(j for j in snapshot.running if j.id not in gone))


def test_a_fraction_within_its_guarantee_reclaims_one_gpu_and_starts_there_once_free() -> None:
    nodes = (gpu_node("n1", 2),)
    snapshot = snap(nodes, (frac(1, "b", 250),), borrowers({"n1": 2}), TEAMS)
    result = plan(snapshot)
    assert [p.job_id for p in result.preemptions] == [101]  # the most recently started
    assert result.preemptions[0].for_job_id == 1
    (waiting,) = result.pending
    assert waiting.reason.code is ReasonCode.WAITING_FOR_PREEMPTION
    later = plan(after_victims_leave(snapshot, result))
    assert [a.job_id for a in later.admissions] == [1]
    assert later.admissions[0].devices[0][0] == "n1"


def test_a_fraction_waiting_for_its_victim_claims_it_and_preempts_nothing_more() -> None:
    nodes = (gpu_node("n1", 2),)
    jobs = borrowers({"n1": 2})
    # The victim of the cycle before is saving its checkpoint for job 1.
    jobs = (jobs[0], replace(jobs[1], preempting_since=NOW - 5, preempted_for=1))
    result = plan(snap(nodes, (frac(1, "b", 250),), jobs, TEAMS))
    assert result.preemptions == ()
    assert result.withdrawals == ()
    assert result.pending[0].reason.code is ReasonCode.WAITING_FOR_PREEMPTION


def test_a_fraction_beyond_its_guarantee_waits_and_preempts_nobody() -> None:
    nodes = (gpu_node("n1", 2),)
    teams = (team("a", guarantee=0, limit=100), team("b", guarantee=0, limit=100))
    result = plan(snap(nodes, (frac(1, "b", 250),), borrowers({"n1": 2}), teams))
    assert result.preemptions == ()
    assert result.pending[0].reason.code is not ReasonCode.WAITING_FOR_PREEMPTION


def test_a_model_bound_gang_reclaims_only_on_nodes_of_its_model() -> None:
    nodes = (gpu_node("n1", 2, "H100-SXM"), gpu_node("n2", 2, "A100-80GB"))
    job = bound(1, "b", ("A100-80GB",), workers=2)
    snapshot = snap(nodes, (job,), borrowers({"n1": 2, "n2": 2}), TEAMS)
    result = plan(snapshot)
    victims = {p.job_id for p in result.preemptions}
    by_id = {j.id: j for j in snapshot.running}
    assert len(victims) == 2
    assert all(by_id[v].placement[0][0] == "n2" for v in victims)
    later = plan(after_victims_leave(snapshot, result))
    assert [(a.job_id, a.placement) for a in later.admissions] == [(1, (("n2", 2),))]


def test_borrowed_work_on_nodes_the_job_may_not_use_is_never_taken() -> None:
    # The A100 node runs team a's work that may not be preempted; its borrowed H100 work would
    # free GPUs the job cannot use.
    nodes = (gpu_node("n1", 2, "A100-80GB"), gpu_node("n2", 2, "H100-SXM"))
    fixed = tuple(replace(j, preemptible=False) for j in borrowers({"n1": 2}))
    jobs = fixed + borrowers({"n2": 2}, first_id=200)
    result = plan(snap(nodes, (bound(1, "b", ("A100-80GB",)),), jobs, TEAMS))
    assert result.preemptions == ()
    assert result.pending[0].reason.code is not ReasonCode.WAITING_FOR_PREEMPTION


@pytest.mark.parametrize("milli", [0, 250])
def test_a_requeued_borrower_holding_nothing_does_not_take_back_what_a_guarantee_reclaimed(
    milli: int,
) -> None:
    """Team b (no guarantee, holding nothing, owed by its balance) would go first by the time-
    based rule and take the free GPU back, be reclaimed, requeued and go first again, for ever:
    a team below its guarantee waiting for a job within it comes first."""
    teams = (team("a", guarantee=1, limit=1), team("b", guarantee=0, limit=1))
    requeued = pending(1, "b", submitted=NOW - 600)
    claim = (
        frac(2, "a", milli, submitted=NOW - 60) if milli else pending(2, "a", submitted=NOW - 60)
    )
    snapshot = replace(
        snap((gpu_node("n1", 1),), (requeued, claim), (), teams),
        share_balance={("a", "h100"): 0.0, ("b", "h100"): 0.0},
    )
    result = plan(snapshot)
    assert [a.job_id for a in result.admissions] == [2]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    milli=st.sampled_from([0, 250, 500, 900]),
    workers=st.integers(1, 2),
    model_node=st.integers(0, 3),
)
def test_a_job_within_its_guarantee_starts_or_its_victims_make_room_for_it(
    layout: list[int], milli: int, workers: int, model_node: int
) -> None:
    nodes = tuple(
        gpu_node(f"n{i}", 4, "A100" if i == model_node % len(layout) else "H100")
        for i in range(len(layout))
    )
    snapshot_jobs = borrowers({f"n{i}": used for i, used in enumerate(layout)})
    if milli:
        job = frac(1, "b", milli, workers=workers)
    else:
        job = bound(1, "b", ("A100",), workers=workers)
    teams = (team("a", guarantee=0, limit=100), team("b", guarantee=workers, limit=100))
    snapshot = snap(nodes, (job,), snapshot_jobs, teams)
    result = plan(snapshot)
    if result.admissions:
        return
    # Every node has 4 GPUs, all held by borrowed one-GPU jobs at most: room can always be made.
    a100 = f"n{model_node % len(layout)}"
    assert result.preemptions, "a job within its guarantee neither started nor reclaimed"
    assert all(p.for_job_id == 1 for p in result.preemptions)
    by_id = {j.id: j for j in snapshot.running}
    if not milli:
        assert all(by_id[p.job_id].placement[0][0] == a100 for p in result.preemptions)
    later = plan(after_victims_leave(snapshot, result))
    assert [a.job_id for a in later.admissions] == [1]
