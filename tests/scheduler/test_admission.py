"""Gangs, placement, order, limits and borrowing: who is admitted where, and in which order."""

from __future__ import annotations

import pytest

from gpuqueue.scheduler.model import PlacementStrategy, Policy, Quota, ReasonCode
from tests.scheduler.builders import Case, check, node, nodes, pending, running, team

GANGS_AND_PLACEMENT = [
    Case(
        "a gang of 8 waits rather than taking 6",
        nodes=nodes(4, h100=8),
        teams=(team("a"), team("b", guarantee=32)),
        running=(
            running(10, "b", {"n1": 3}, gpus=2, preemptible=False),
            running(11, "b", {"n2": 3}, gpus=2, preemptible=False),
            running(12, "b", {"n3": 3}, gpus=2, preemptible=False),
            running(13, "b", {"n4": 4}, gpus=2, preemptible=False),
        ),
        pending=(pending(1, "a", workers=4, gpus=2),),
        admitted=set(),
        reasons={1: ReasonCode.NO_CAPACITY},
        numbers={1: {"workers": 4, "gpus_per_worker": 2, "workers_fit": 3, "free": 6}},
    ),
    Case(
        "a gang no single node can hold is placed whole across nodes",
        nodes=nodes(2, h100=8),
        teams=(team("a"),),
        pending=(pending(1, "a", workers=3, gpus=4),),
        placements={1: {"n1": 2, "n2": 1}},
    ),
    Case(
        "bin-pack puts a worker on the fullest node that still fits",
        nodes=(node("n1", h100=8), node("n2", h100=8), node("n3", h100=8)),
        teams=(team("a"), team("b", guarantee=24)),
        running=(
            running(10, "b", {"n2": 6}, preemptible=False),
            running(11, "b", {"n3": 4}, preemptible=False),
        ),
        pending=(pending(1, "a", gpus=2),),
        placements={1: {"n2": 1}},
    ),
    Case(
        "bin-pack keeps a gang on one node when one node can hold it",
        nodes=(node("n1", h100=8), node("n2", h100=8), node("n3", h100=8)),
        teams=(team("a"), team("b", guarantee=24)),
        running=(
            running(10, "b", {"n1": 5}, preemptible=False),
            running(11, "b", {"n3": 4}, preemptible=False),
        ),
        pending=(pending(1, "a", workers=2, gpus=2),),
        placements={1: {"n3": 2}},
    ),
    Case(
        "spread deals the workers of a gang over the emptiest nodes",
        nodes=(node("n1", h100=8), node("n2", h100=8), node("n3", h100=8)),
        teams=(team("a"), team("b", guarantee=24)),
        running=(running(10, "b", {"n3": 4}, preemptible=False),),
        pending=(pending(1, "a", workers=3, gpus=2),),
        policy=Policy(placement=PlacementStrategy.SPREAD),
        placements={1: {"n1": 1, "n2": 1, "n3": 1}},
    ),
    Case(
        "a cordoned node takes no new work",
        nodes=(node("n1", h100=8, schedulable=False), node("n2", h100=8)),
        teams=(team("a"), team("b", guarantee=8)),
        running=(running(10, "b", {"n2": 6}, preemptible=False),),
        pending=(pending(1, "a", gpus=4),),
        admitted=set(),
        numbers={1: {"free": 2, "workers_fit": 0}},
    ),
    Case(
        "GPUs held by pods gpuqueue did not create are not free",
        nodes=(node("n1", h100=8, external=6),),
        teams=(team("a"),),
        pending=(pending(1, "a", workers=1, gpus=4), pending(2, "a", workers=1, gpus=2)),
        admitted={2},
    ),
    Case(
        "two gangs never share the same free GPUs",
        nodes=(node("n1", h100=8),),
        teams=(team("a"), team("b")),
        pending=(pending(1, "a", workers=2, gpus=4), pending(2, "b", workers=2, gpus=4)),
        admitted={1},
        reasons={2: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "a small job behind a waiting gang still starts when it fits",
        nodes=(node("n1", h100=8),),
        teams=(team("a"), team("b", guarantee=8)),
        running=(running(10, "b", {"n1": 4}, preemptible=False),),
        pending=(pending(1, "a", workers=2, gpus=4), pending(2, "a", gpus=2)),
        admitted={2},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "jobs of one flavor never land on nodes of another",
        nodes=(node("n1", h100=8), node("n2", l4=4)),
        teams=(team("a", quotas={"h100": Quota(0, 8), "l4": Quota(0, 4)}),),
        pending=(pending(1, "a", gpus=4, flavor="l4"), pending(2, "a", gpus=8)),
        placements={1: {"n2": 1}, 2: {"n1": 1}},
    ),
]

ORDER = [
    Case(
        "the team furthest below its fair share goes first",
        nodes=(node("n1", h100=8),),
        teams=(team("a"), team("b")),
        running=(running(10, "a", {"n1": 1}, gpus=4),),
        pending=(pending(1, "a", gpus=4), pending(2, "b", gpus=4)),
        admitted={2},
    ),
    Case(
        "inside a team the higher priority goes first",
        nodes=(node("n1", h100=4),),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=4), pending(2, "a", gpus=4, priority=5)),
        admitted={2},
    ),
    Case(
        "inside a priority the user with fewer GPUs in use goes first",
        nodes=(node("n1", h100=8),),
        teams=(team("a"),),
        running=(running(10, "a", {"n1": 4}, user="alice", preemptible=False),),
        pending=(pending(1, "a", gpus=4, user="alice"), pending(2, "a", gpus=4, user="bob")),
        admitted={2},
    ),
    Case(
        "inside a user the earlier submission goes first",
        nodes=(node("n1", h100=4),),
        teams=(team("a"),),
        pending=(pending(2, "a", gpus=4, submitted=50.0), pending(1, "a", gpus=4, submitted=60.0)),
        admitted={2},
    ),
]

LIMITS = [
    Case(
        "a team never goes past its limit even when GPUs are idle",
        nodes=nodes(2, h100=8),
        teams=(team("a", limit=8),),
        running=(running(10, "a", {"n1": 8}),),
        pending=(pending(1, "a", gpus=4),),
        admitted=set(),
        reasons={1: ReasonCode.OVER_LIMIT},
        numbers={1: {"scope": "team", "limit": 8, "in_use": 8, "requested": 4}},
    ),
    Case(
        "non-preemptible work may only use the guarantee",
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=4),),
        running=(running(10, "a", {"n1": 4}, preemptible=False),),
        pending=(pending(1, "a", gpus=2, preemptible=False), pending(2, "a", gpus=2)),
        admitted={2},
        reasons={1: ReasonCode.OVER_FAIR_SHARE},
        numbers={1: {"guarantee": 4, "in_use": 4, "requested": 2}},
    ),
    Case(
        "preemptible work borrows idle GPUs beyond the fair share and says so",
        nodes=nodes(2, h100=8),
        teams=(team("a", limit=16), team("b", limit=4)),
        pending=(pending(1, "a", workers=7, gpus=2), pending(2, "b", workers=8)),
        admitted={1},
        borrowed={1: True},
        shares={("a", "h100"): 12, ("b", "h100"): 4},
        reasons={2: ReasonCode.OVER_LIMIT},
    ),
    Case(
        "work within the fair share is not borrowed",
        nodes=nodes(2, h100=8),
        teams=(team("a"), team("b")),
        pending=(pending(1, "a", workers=2, gpus=4), pending(2, "b", workers=1, gpus=4)),
        admitted={1, 2},
        borrowed={1: False, 2: False},
    ),
    Case(
        "a team without a quota for the flavor cannot use it",
        nodes=(node("n1", h100=8),),
        teams=(team("a", flavor="l4"),),
        pending=(pending(1, "a"),),
        admitted=set(),
        reasons={1: ReasonCode.NO_QUOTA},
    ),
]

CASES = GANGS_AND_PLACEMENT + ORDER + LIMITS


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_admission(case: Case) -> None:
    check(case)
