"""Preemption inside a team by priority, and reclaim of borrowed GPUs across teams."""

from __future__ import annotations

from dataclasses import replace
from unittest.mock import patch

import pytest
from hypothesis import given

from gpuqueue.scheduler import forecast, plan
from gpuqueue.scheduler.model import Plan, Policy, ReasonCode, Snapshot
from gpuqueue.scheduler.preemption import VictimSearch
from tests.scheduler.builders import HOUR, NOW, Case, check, node, nodes, pending, running, team
from tests.scheduler.test_properties import SETTINGS, policies, snapshots


def morning_grab(policy: Policy | None = None, **want: object) -> dict[str, object]:
    """Team a took all 16 GPUs with single-GPU jobs (later ids started later); team b, with a
    guarantee of 8, now asks for 8."""
    grab = tuple(
        running(100 + i, "a", {"n1" if i < 8 else "n2": 1}, started=NOW - 2 * HOUR + 60 * i)
        for i in range(16)
    )
    return {
        "nodes": nodes(2, h100=8),
        "teams": (team("a", guarantee=4, limit=16), team("b", guarantee=8, limit=16)),
        "running": grab,
        "pending": (pending(1, "b", workers=8),),
        "policy": policy or Policy(),
        **want,
    }


def last_job(guarantee: int, policy: Policy | None = None) -> dict[str, object]:
    """Team a (no guarantee, weight 0: its share is 0) runs one 8-GPU job on n1 (for 5 hours,
    past Policy.reclaim_min_runtime_seconds); team b runs 8 non-preemptible GPUs on n2 and
    asks for 8 more, within its share of 16."""
    return {
        "nodes": nodes(2, h100=8),
        "teams": (team("a", weight=0.0), team("b", guarantee=guarantee, limit=16)),
        "running": (
            running(10, "a", {"n1": 1}, gpus=8, started=NOW - 5 * HOUR),
            running(11, "b", {"n2": 1}, gpus=8, preemptible=False, started=NOW - 5 * HOUR),
        ),
        "pending": (pending(1, "b", gpus=8),),
        "policy": policy or Policy(),
    }


def young_grab(guarantee: int, policy: Policy | None = None) -> dict[str, object]:
    """Team a (guarantee 8) started 16 single-GPU jobs 1,000 s ago and after (later ids later);
    team b asks for 4 GPUs on one node, within its fair share of 4."""
    grab = tuple(
        running(100 + i, "a", {"n1" if i < 8 else "n2": 1}, started=NOW - 1000 + 10 * i)
        for i in range(16)
    )
    return {
        "nodes": nodes(2, h100=8),
        "teams": (team("a", guarantee=8, limit=16), team("b", guarantee=guarantee, limit=16)),
        "running": grab,
        "pending": (pending(1, "b", gpus=4),),
        "policy": policy or Policy(),
    }


PRIORITY = [
    Case(
        "a higher-priority job preempts its team's lower-priority preemptible job",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        running=(running(10, "a", {"n1": 1}, gpus=8),),
        pending=(pending(1, "a", gpus=8, priority=10),),
        admitted=set(),
        preempted={10: "priority"},
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
        waits_on={1: (10,)},
    ),
    Case(
        "non-preemptible jobs are never preempted",
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8),),
        running=(running(10, "a", {"n1": 1}, gpus=8, preemptible=False),),
        pending=(pending(1, "a", gpus=8, priority=10),),
        preempted={},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "a job inside the policy's minimum runtime is not preempted",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        running=(running(10, "a", {"n1": 1}, gpus=8, started=NOW - 60),),
        pending=(pending(1, "a", gpus=8, priority=10),),
        preempted={},
    ),
    Case(
        "a job's own minimum-runtime end protects it even when it started long ago",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        running=(running(10, "a", {"n1": 1}, gpus=8, min_runtime_until=NOW + 100),),
        pending=(pending(1, "a", gpus=8, priority=10),),
        preempted={},
    ),
    Case(
        "the most recently started of equal victims goes first",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        running=(
            running(10, "a", {"n1": 1}, gpus=4, started=NOW - 2 * HOUR),
            running(11, "a", {"n1": 1}, gpus=4, started=NOW - HOUR),
        ),
        pending=(pending(1, "a", gpus=4, priority=5),),
        preempted={11: "priority"},
    ),
    Case(
        "the lowest priority goes first even if it started earlier",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        running=(
            running(10, "a", {"n1": 1}, gpus=4, priority=1, started=NOW - HOUR),
            running(11, "a", {"n1": 1}, gpus=4, priority=0, started=NOW - 2 * HOUR),
        ),
        pending=(pending(1, "a", gpus=4, priority=5),),
        preempted={11: "priority"},
    ),
    Case(
        "only as many jobs are preempted as the gang needs",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        running=tuple(
            running(10 + i, "a", {"n1": 1}, gpus=2, started=NOW - 2 * HOUR + 60 * i)
            for i in range(4)
        ),
        pending=(pending(1, "a", gpus=4, priority=5),),
        preempted={12: "priority", 13: "priority"},
    ),
    Case(
        "GPUs already on their way back are waited for, not preempted again",
        nodes=nodes(2, h100=8),
        teams=(team("a"),),
        running=(
            running(10, "a", {"n1": 1}, gpus=8, preempting_since=NOW - 10),
            running(11, "a", {"n2": 1}, gpus=8),
        ),
        pending=(pending(1, "a", gpus=8, priority=10),),
        preempted={},
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
        waits_on={1: (10,)},
    ),
    Case(
        "priority preemption is off when the policy turns it off",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        running=(running(10, "a", {"n1": 1}, gpus=8),),
        pending=(pending(1, "a", gpus=8, priority=10),),
        policy=Policy(preemption=False),
        preempted={},
    ),
    Case(
        "a job at its team's limit may still preempt its team's lower-priority work",
        nodes=(node("n1", h100=16),),
        teams=(team("a", limit=8),),
        running=(running(10, "a", {"n1": 1}, gpus=8),),
        pending=(pending(1, "a", gpus=8, priority=5),),
        preempted={10: "priority"},
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
    ),
    Case(
        "a job at its team's limit with nothing lower to preempt stays over the limit",
        nodes=(node("n1", h100=16),),
        teams=(team("a", limit=8),),
        running=(running(10, "a", {"n1": 1}, gpus=8, priority=5),),
        pending=(pending(1, "a", gpus=8, priority=5),),
        preempted={},
        reasons={1: ReasonCode.OVER_LIMIT},
    ),
]

RECLAIM = [
    Case(
        "the morning grab: a team under its guarantee reclaims the most recently started jobs",
        **morning_grab(
            preempted={100 + i: "reclaim" for i in range(8, 16)},
            reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
            shares={("a", "h100"): 8, ("b", "h100"): 8},
        ),  # type: ignore[arg-type]
    ),
    Case(
        "reclaim is off when the policy turns it off",
        **morning_grab(Policy(reclaim=False), preempted={}),  # type: ignore[arg-type]
    ),
    Case(
        "the victim search stops at the policy's bound",
        **morning_grab(Policy(max_victim_candidates=4), preempted={}),  # type: ignore[arg-type]
    ),
    Case(
        "a cycle never preempts more jobs than its budget",
        **morning_grab(Policy(max_preemptions_per_cycle=4), preempted={}),  # type: ignore[arg-type]
    ),
    Case(
        "a team does not reclaim what would take it past its own fair share",
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=8), team("b", guarantee=4)),
        running=(
            running(10, "a", {"n1": 1}, gpus=4),
            running(11, "a", {"n1": 1}, gpus=4),
            running(12, "a", {"n2": 1}, gpus=8),
        ),
        pending=(pending(1, "b", gpus=8),),
        shares={("a", "h100"): 10, ("b", "h100"): 6},
        preempted={},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "reclaim never takes a victim team below its own fair share",
        nodes=nodes(2, h100=8),
        teams=(team("a"), team("b", guarantee=4), team("c", guarantee=4)),
        running=(
            running(10, "a", {"n1": 1}, gpus=8),
            running(11, "c", {"n2": 1}, gpus=4, preemptible=False),
        ),
        pending=(pending(1, "b", gpus=8),),
        shares={("a", "h100"): 4, ("b", "h100"): 8, ("c", "h100"): 4},
        preempted={},
    ),
    Case(
        "reclaim beyond a guarantee never takes the last job of a team with no share",
        **last_job(guarantee=4),  # type: ignore[arg-type]
        shares={("a", "h100"): 0, ("b", "h100"): 16},
        preempted={},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "without min_one_job reclaim takes the last job of a team with no share",
        **last_job(guarantee=4, policy=Policy(min_one_job=False)),  # type: ignore[arg-type]
        preempted={10: "reclaim"},
    ),
    Case(
        "a team claiming its guarantee takes even the last job of a team with no share",
        **last_job(guarantee=16),  # type: ignore[arg-type]
        preempted={10: "reclaim"},
    ),
    Case(
        "reclaim for a share above the guarantee takes the most recently started jobs "
        "once they ran reclaim_min_runtime_seconds",
        **young_grab(guarantee=0, policy=Policy(reclaim_min_runtime_seconds=300)),  # type: ignore[arg-type]
        shares={("a", "h100"): 12, ("b", "h100"): 4},
        preempted={112: "reclaim", 113: "reclaim", 114: "reclaim", 115: "reclaim"},
    ),
    Case(
        "reclaim for a share above the guarantee spares jobs younger than 30 minutes",
        **young_grab(guarantee=0),  # type: ignore[arg-type]
        preempted={},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "reclaim within a guarantee keeps the ordinary minimum runtime",
        **young_grab(guarantee=4),  # type: ignore[arg-type]
        preempted={112: "reclaim", 113: "reclaim", 114: "reclaim", 115: "reclaim"},
    ),
    Case(
        "a department under its share reclaims from a department above its share",
        nodes=nodes(2, h100=8),
        teams=(
            team("x", guarantee=8),
            team("y", guarantee=8),
            team("x1", parent="x"),
            team("y1", guarantee=8, parent="y"),
        ),
        running=tuple(
            running(100 + i, "x1", {"n1" if i < 8 else "n2": 1}, started=NOW - 2 * HOUR + i)
            for i in range(16)
        ),
        pending=(pending(1, "y1", workers=8),),
        preempted={100 + i: "reclaim" for i in range(8, 16)},
    ),
    Case(
        # 5 GPUs free (1, 3, 1) and the hog's 3 beyond its share: in rule order or node by node
        # they would all go to one node (one more worker of 2); one GPU from each node makes
        # every node's free GPUs even, and the 4 workers fit (VictimSearch._cheapest_first).
        "a team's spare share spent one GPU per node makes room where one node would not",
        nodes=nodes(3, h100=8),
        teams=(team("hog", limit=24), team("b", guarantee=8, limit=24)),
        running=tuple(
            running(k, "hog", {node: 1}, started=NOW - 2 * HOUR + k)
            for k, node in enumerate(["n1"] * 7 + ["n2"] * 5 + ["n3"] * 7, start=100)
        ),
        pending=(pending(1, "b", workers=4, gpus=2),),
        preempted={106: "reclaim", 111: "reclaim", 118: "reclaim"},
    ),
]

CASES = PRIORITY + RECLAIM


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_preemption(case: Case) -> None:
    check(case)


@SETTINGS
@given(snapshots(), policies())
def test_searches_cut_short_by_what_the_candidates_could_free_decide_as_full_searches(
    snapshot: Snapshot, policy: Policy
) -> None:
    """`VictimSearch._may_fit` only skips searches that would fail anyway: every plan (its
    preemptions, admissions and reasons) is the same with every search run to the end."""
    cut = plan(snapshot, policy)
    with patch.object(VictimSearch, "_may_fit", lambda *_: True):
        full = plan(snapshot, policy)
    assert cut == full


def plan_noting_may_fit(snapshot: Snapshot) -> tuple[Plan, list[bool]]:
    """The plan, and each answer of the test that cuts victim searches short."""
    searched: list[bool] = []
    real = VictimSearch._may_fit

    def spy(self: VictimSearch, *args: object) -> bool:
        searched.append(real(self, *args))  # type: ignore[arg-type]
        return searched[-1]

    with patch.object(VictimSearch, "_may_fit", spy):
        return plan(snapshot, Policy()), searched


def test_a_team_gives_no_job_bigger_than_what_it_holds_beyond_its_share() -> None:
    """Team a holds 10 GPUs with a share of 8: its 8-GPU job cannot go (a would keep 2), its
    2-GPU job is not enough, and team c's work cannot be preempted; so team b's 8-GPU job,
    within b's share, waits, and the search is cut short before trying the candidates."""
    snapshot = Snapshot(
        now=NOW,
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=8), team("b", guarantee=8), team("c")),
        running=(
            running(10, "a", {"n1": 1}, gpus=8, started=NOW - 2 * HOUR),
            running(11, "a", {"n2": 1}, gpus=2, started=NOW - 2 * HOUR),
            running(12, "c", {"n2": 1}, gpus=6, preemptible=False, started=NOW - 2 * HOUR),
        ),
        pending=(pending(1, "b", gpus=8),),
    )
    result, searched = plan_noting_may_fit(snapshot)
    assert not result.admissions and not result.preemptions
    assert searched == [False]


def test_a_team_gives_no_more_on_one_node_than_what_it_holds_beyond_its_share() -> None:
    """Teams a and d each borrow a whole node in one-GPU jobs (guarantees and shares 4 and 4
    of 16): 8 GPUs beyond their shares in all, enough for team b's 8-GPU worker by count, and
    n1 alone holds 8 of a's. But a can give only 4 there, d only 4 on n2 (their guarantees
    too): no node comes free, b waits, and the search is cut short before trying the
    candidates."""
    snapshot = Snapshot(
        now=NOW,
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=4), team("b", guarantee=8), team("d", guarantee=4)),
        running=tuple(
            running(
                100 + k, "a" if k < 8 else "d", {"n1" if k < 8 else "n2": 1}, started=NOW - 5 * HOUR
            )
            for k in range(16)
        ),
        pending=(pending(1, "b", gpus=8),),
    )
    result, searched = plan_noting_may_fit(snapshot)
    assert result.fair_shares[("a", "h100")] == result.fair_shares[("d", "h100")] == 4
    assert not result.admissions and not result.preemptions
    assert searched == [False]


def test_no_job_is_preempted_for_a_worker_that_no_node_could_hold() -> None:
    """Team a borrows 4 GPUs on each of two 8-GPU nodes, next to team c's non-preemptible
    work: 8 GPUs in all, enough for team b's one 8-GPU worker by count, but no node could
    come free. Nothing is preempted and b waits."""
    snapshot = Snapshot(
        now=NOW,
        nodes=nodes(2, h100=8),
        teams=(team("a"), team("b", guarantee=8), team("c", guarantee=8)),
        running=(
            running(10, "a", {"n1": 1}, gpus=4, started=NOW - 5 * HOUR),
            running(11, "a", {"n2": 1}, gpus=4, started=NOW - 5 * HOUR),
            running(12, "c", {"n1": 1}, gpus=4, preemptible=False, started=NOW - 5 * HOUR),
            running(13, "c", {"n2": 1}, gpus=4, preemptible=False, started=NOW - 5 * HOUR),
        ),
        pending=(pending(1, "b", gpus=8),),
    )
    result = plan(snapshot, Policy())
    assert not result.admissions and not result.preemptions
    assert result.pending[0].reason.code == ReasonCode.NO_CAPACITY


def test_gpus_already_coming_back_count_toward_what_a_search_may_free() -> None:
    """Team a's 4-GPU job is being preempted; with a's 2-GPU job those 4 GPUs make room for
    team b's 6-GPU job, within b's guarantee: the search is not cut short."""
    snapshot = Snapshot(
        now=NOW,
        nodes=nodes(1, h100=8),
        teams=(team("a"), team("b", guarantee=6), team("c", guarantee=2)),
        running=(
            replace(running(10, "a", {"n1": 1}, gpus=4), preempting_since=NOW - 30),
            running(11, "a", {"n1": 1}, gpus=2, started=NOW - 2 * HOUR),
            running(12, "c", {"n1": 1}, gpus=2, preemptible=False),
        ),
        pending=(pending(1, "b", gpus=6),),
    )
    result = plan(snapshot, Policy())
    assert [(p.job_id, p.for_job_id) for p in result.preemptions] == [(11, 1)]


def test_a_job_preempted_for_its_teams_higher_priority_job_does_not_take_its_gpus_back() -> None:
    # Job 10 (priority 0) is preempted for job 2 (priority 2) of its team and queues again with
    # its old submission time: it has waited past the threshold, job 2 not yet, and it fits
    # its team's room. It must not start again as a starving job on the GPUs it gave up, or
    # job 2 preempts it again once its minimum runtime ends, cycle after cycle.
    nodes_ = (node("n1", h100=8),)
    teams = (team("a", guarantee=8, limit=8),)
    late = pending(2, "a", gpus=8, priority=2, submitted=NOW - 1800)
    first = plan(
        Snapshot(
            now=NOW,
            nodes=nodes_,
            teams=teams,
            running=(running(10, "a", {"n1": 1}, gpus=8, started=NOW - 2 * HOUR),),
            pending=(late,),
        )
    )
    assert [(p.job_id, p.reason) for p in first.preemptions] == [(10, "priority")]
    requeued = pending(10, "a", gpus=8, submitted=NOW - 2 * HOUR)
    again = plan(
        Snapshot(now=NOW + 300, nodes=nodes_, teams=teams, running=(), pending=(requeued, late))
    )
    assert [a.job_id for a in again.admissions] == [2]


def test_the_forecast_gives_a_start_to_both_jobs_of_different_priorities() -> None:
    # Room for one of two jobs of team a. Before the fix, job 10 (priority 0, waiting longest)
    # started as a starving job, job 2 (priority 2) preempted it once its minimum runtime was
    # over, job 10 came back as a starving job on the GPUs it had given up, and so on: job 2
    # never had a start. Rule 3 first: job 2 now, job 10 when job 2 ends.
    snapshot = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8, limit=8),),
        running=(),
        pending=(
            pending(10, "a", gpus=8, submitted=NOW - 3 * HOUR, expected_runtime=HOUR),
            pending(2, "a", gpus=8, priority=2, submitted=NOW - 1800, expected_runtime=HOUR),
        ),
    )
    starts = forecast(snapshot, Policy())
    assert starts == {2: NOW, 10: NOW + HOUR}
