"""Holdings kept job by job count the running jobs as a fresh ledger does (Hypothesis).

The replay adds, replaces and removes running jobs one at a time and plans from a copy of the
holdings' ledger; placement takes nodes in bucket order, so the buckets must list their nodes in
the order `Ledger.hold_running` leaves them, not only hold the same counts.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.holdings import Holdings, team_chains
from gpuqueue.scheduler.ledger import Ledger
from gpuqueue.scheduler.model import Node, Policy, Quota, RunningJob, Snapshot, Team
from gpuqueue.scheduler.preemption import VictimIndex
from gpuqueue.scheduler.starvation import Reserver
from tests.scheduler.test_properties import SETTINGS, policies, snapshots

NODES = (
    Node("n0", {"h100": 8}),
    Node("n1", {"h100": 8, "l4": 4}),
    Node("n2", {"h100": 4}, {"h100": 1}),
    Node("n3", {"l4": 4}),
    Node("n4", {"h100": 8}, schedulable=False),
    Node("n5", {"h100": 8}),
)
TEAMS = (
    Team("a", {"h100": Quota(4, 16), "l4": Quota(0, 8)}, "d"),
    Team("b", {"h100": Quota(4, 16)}, "d"),
    Team("c", {"h100": Quota(8, 24), "l4": Quota(4, 8)}),
    Team("d", {"h100": Quota(8, 32), "l4": Quota(0, 8)}),
)


@st.composite
def running_jobs(draw: st.DrawFn, job_id: int) -> RunningJob:
    flavor = draw(st.sampled_from(["h100", "l4", "a100"]))  # no node offers a100
    names = draw(st.lists(st.sampled_from([n.name for n in NODES]), min_size=1, max_size=3))
    placement = tuple((name, draw(st.integers(1, 2))) for name in names)
    return RunningJob(
        id=job_id,
        team=draw(st.sampled_from(["a", "b", "c", "d", "x"])),  # x has no quota
        user=draw(st.sampled_from(["u1", "u2"])),
        flavor=flavor,
        gpus_per_worker=draw(st.sampled_from([1, 2, 4])),
        placement=placement,
        priority=draw(st.integers(0, 2)),
        preemptible=draw(st.booleans()),
        started_at=draw(st.sampled_from([0.0, 60.0, 120.0])),
        max_runtime=draw(st.sampled_from([None, 600.0, math.inf])),
        expected_runtime=draw(st.sampled_from([None, None, 60.0, 300.0])),
        preempting_since=draw(st.sampled_from([None, None, 30.0])),
    )


def _ledger_state(ledger: Ledger) -> dict[str, object]:
    flavors = {
        name: (
            fl.free,
            [(count, list(nodes)) for count, nodes in fl.buckets.items() if nodes],
            fl.incoming,
            fl.held,
            fl.total_free,
            fl.max_node,
        )
        for name, fl in ledger.flavors.items()
    }
    return {
        "flavors": flavors,
        "flavor_order": list(ledger.flavors),
        "used": ledger.used,
        "leaving": ledger.leaving,
        "nonpreemptible": ledger.nonpreemptible,
        "user_used": ledger.user_used,
        "incoming_jobs": ledger.incoming_jobs,
        "victims": ledger.victims,
    }


def _index_state(index: VictimIndex, jobs: tuple[RunningJob, ...]) -> tuple[object, ...]:
    keys = sorted({(j.team, j.flavor) for j in jobs})
    return (
        index.lowest,
        index.teams_by_flavor,
        {key: [j.id for j in index.of(*key)] for key in keys},
    )


def _check(holdings: Holdings, data: st.DataObject) -> None:
    jobs = tuple(holdings.jobs.values())
    fresh = Ledger(NODES, team_chains(TEAMS))
    totals = fresh.hold_running(jobs)
    assert _ledger_state(holdings.ledger()) == _ledger_state(fresh)
    assert holdings.running_totals() == totals
    assert _index_state(holdings.victim_index(), jobs) == _index_state(VictimIndex(jobs), jobs)
    # The release events a reservation replays, at a time before, between or after the ends
    # (which are then clamped to it), with some jobs chosen as this cycle's victims.
    now = data.draw(st.sampled_from([0.0, 200.0, 400.0, 10_000.0]))
    fresh.victims = set(data.draw(st.lists(st.sampled_from([0, *holdings.jobs]))))
    kept = Reserver(fresh, NODES, jobs, Policy(), now, holdings.release_events())
    made = Reserver(fresh, NODES, jobs, Policy(), now)
    for fl in fresh.flavors.values():
        assert kept.release_events(fl) == made.release_events(fl)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), steps=st.integers(1, 30))
def test_holdings_changed_job_by_job_give_the_ledger_and_victims_of_a_fresh_count(
    data: st.DataObject, steps: int
) -> None:
    holdings = Holdings(NODES, TEAMS)
    next_id = 1
    for _ in range(steps):
        action = data.draw(st.sampled_from(["add", "add", "remove", "replace"]))
        if action == "add" or not holdings.jobs:
            holdings.add(data.draw(running_jobs(next_id)))
            next_id += 1
        elif action == "remove":
            holdings.remove(data.draw(st.sampled_from(sorted(holdings.jobs))))
        else:
            job = holdings.jobs[data.draw(st.sampled_from(sorted(holdings.jobs)))]
            holdings.replace(replace(job, preempting_since=90.0))
        _check(holdings, data)


def test_holdings_refuse_a_job_that_holds_no_gpus_on_a_node() -> None:
    holdings = Holdings(NODES, TEAMS)
    job = RunningJob(1, "a", "u1", "h100", 2, (("n0", 0),), 0, True, 0.0)
    try:
        holdings.add(job)
    except ValueError:
        pass
    else:
        raise AssertionError("a job with no workers on a node was taken")
    assert not holdings.jobs


@SETTINGS
@given(snapshots(), policies(), st.data())
def test_a_plan_from_holdings_kept_job_by_job_is_the_plan_of_the_snapshot(
    snapshot: Snapshot, policy: Policy, data: st.DataObject
) -> None:
    """The holdings see every running job added in the snapshot's order, with other jobs
    coming and going in between and preemptions starting after the start."""
    holdings = Holdings(snapshot.nodes, snapshot.teams)
    others: list[int] = []
    for i, job in enumerate(snapshot.running):
        if data.draw(st.booleans()):
            other = replace(job, id=10_000 + i, preempting_since=None)
            holdings.add(other)
            others.append(other.id)
        if job.preempting_since is not None and data.draw(st.booleans()):
            holdings.add(replace(job, preempting_since=None))
            holdings.replace(job)
        else:
            holdings.add(job)
        if others and data.draw(st.booleans()):
            holdings.remove(others.pop(data.draw(st.integers(0, len(others) - 1))))
    for job_id in others:
        holdings.remove(job_id)
    assert tuple(holdings.jobs.values()) == snapshot.running
    got = plan(snapshot, policy, explain=False, holdings=holdings)
    assert got == replace(plan(snapshot, policy), pending=())
    assert plan(snapshot, policy, holdings=holdings) == plan(snapshot, policy)


@SETTINGS
@given(snapshots(), policies(), st.data())
def test_plans_from_the_same_holdings_over_changing_queues_are_the_plans_of_the_snapshots(
    snapshot: Snapshot, policy: Policy, data: st.DataObject
) -> None:
    """The holdings keep what the order read of each queue (`QueueMemo`) from plan to plan:
    a queue whose jobs changed since (jobs gone, jobs back, an equal copy of a job, another
    order) must be read again, and one that did not gives the same order as a fresh read."""
    holdings = Holdings(snapshot.nodes, snapshot.teams)
    for job in snapshot.running:
        holdings.add(job)
    for _ in range(3):
        pending = list(snapshot.pending)
        if pending and data.draw(st.booleans()):
            pending = data.draw(st.permutations(pending))
        if pending and data.draw(st.booleans()):
            del pending[data.draw(st.integers(0, len(pending) - 1))]
        if pending and data.draw(st.booleans()):
            i = data.draw(st.integers(0, len(pending) - 1))
            pending[i] = replace(pending[i])  # equal, not the same object
        later = replace(snapshot, pending=tuple(pending))
        assert plan(later, policy, holdings=holdings) == plan(later, policy)
