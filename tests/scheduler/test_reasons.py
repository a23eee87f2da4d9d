"""Every job left pending carries a reason with its numbers, and its place in line."""

from __future__ import annotations

import pytest

from gpuqueue.scheduler.model import ReasonCode
from tests.scheduler.builders import NOW, Case, check, node, nodes, pending, running, team

CASES = [
    Case(
        "over the limit says the limit, the usage and the request",
        nodes=nodes(2, h100=8),
        teams=(team("a", limit=6),),
        running=(running(10, "a", {"n1": 4}),),
        pending=(pending(1, "a", workers=2, gpus=2),),
        reasons={1: ReasonCode.OVER_LIMIT},
        numbers={1: {"flavor": "h100", "limit": 6, "in_use": 4, "requested": 4}},
    ),
    Case(
        "waiting behind earlier jobs of the team counts them",
        nodes=(node("n1", h100=8),),
        teams=(team("a"), team("b")),
        running=(running(10, "b", {"n1": 1}, gpus=8),),
        pending=tuple(pending(i, "a", gpus=4) for i in (1, 2, 3)),
        reasons={
            1: ReasonCode.NO_CAPACITY,
            2: ReasonCode.QUEUED_BEHIND_TEAM,
            3: ReasonCode.QUEUED_BEHIND_TEAM,
        },
        numbers={2: {"ahead": 1, "free": 0}, 3: {"ahead": 2}},
        positions={1: (1, 1), 2: (2, 2), 3: (3, 3)},
    ),
    Case(
        "positions count only the jobs left pending, per team and cluster-wide",
        nodes=(node("n1", h100=4),),
        teams=(team("a"), team("b")),
        pending=(pending(1, "a", gpus=4), pending(2, "b", gpus=4), pending(3, "a", gpus=4)),
        admitted={1},
        positions={2: (1, 1), 3: (1, 2)},
    ),
    Case(
        "a job of a flavor no node offers never fits",
        nodes=(node("n1", h100=8),),
        teams=(team("a", flavor="l4"),),
        pending=(pending(1, "a", flavor="l4"),),
        reasons={1: ReasonCode.NEVER_FITS},
        numbers={1: {"largest_node": 0, "flavor_capacity": 0}},
    ),
    Case(
        "a worker bigger than every node never fits",
        nodes=nodes(2, h100=8),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=16),),
        reasons={1: ReasonCode.NEVER_FITS},
        numbers={1: {"largest_node": 8, "gpus_per_worker": 16}},
    ),
    Case(
        "a gang bigger than the whole flavor never fits",
        nodes=nodes(2, h100=8),
        teams=(team("a"),),
        pending=(pending(1, "a", workers=3, gpus=8),),
        reasons={1: ReasonCode.NEVER_FITS},
        numbers={1: {"flavor_capacity": 16, "workers": 3}},
    ),
    Case(
        "workers that no set of nodes holds never fit, though the GPUs add up",
        nodes=(node("n1", h100=8), node("n2", h100=8), node("n3", h100=4)),
        teams=(team("a"),),
        pending=(pending(1, "a", workers=3, gpus=6),),
        reasons={1: ReasonCode.NEVER_FITS},
        numbers={1: {"flavor_capacity": 20, "most_workers": 2, "workers": 3}},
    ),
    Case(
        "a department's missing quota is named as the department's",
        nodes=(node("n1", h100=8),),
        teams=(team("d", flavor="l4"), team("t", parent="d")),
        pending=(pending(1, "t"),),
        reasons={1: ReasonCode.NO_QUOTA},
        numbers={1: {"scope": "department"}},
    ),
    Case(
        "a gang whose team's share is held by the team's newer jobs names them",
        nodes=nodes(2, h100=8),
        teams=(team("a"), team("b")),
        running=(
            running(10, "b", {"n1": 1}, gpus=4),
            running(11, "b", {"n2": 1}, gpus=4),
            running(12, "a", {"n1": 1}, gpus=4),  # started before the gang was submitted
            running(13, "a", {"n2": 1}, gpus=4, started=NOW - 10),  # started after
        ),
        pending=(pending(1, "a", gpus=8),),
        shares={("a", "h100"): 8, ("b", "h100"): 8},
        reasons={1: ReasonCode.NO_CAPACITY},
        numbers={1: {"fair_share": 8, "team_in_use": 8, "newer_gpus": 4, "free": 0}},
    ),
    Case(
        "a gang larger than its team's share says the share",
        nodes=nodes(2, h100=8),
        teams=(team("a"), team("b")),
        running=(running(10, "b", {"n1": 1, "n2": 1}, gpus=4),),
        pending=(pending(1, "a", workers=2, gpus=8), pending(2, "b", gpus=8)),
        shares={("a", "h100"): 8},
        reasons={1: ReasonCode.NO_CAPACITY},
        numbers={1: {"fair_share": 8, "team_in_use": 0, "newer_gpus": 0}},
    ),
    Case(
        "a job that fits its team's share says nothing of the share",
        nodes=nodes(2, h100=8),
        teams=(team("a"), team("b")),
        running=(running(10, "b", {"n1": 1, "n2": 1}, gpus=8),),
        pending=(pending(1, "a", gpus=8),),
        reasons={1: ReasonCode.NO_CAPACITY},
        numbers={1: {"fair_share": None, "team_in_use": None, "newer_gpus": None}},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reasons(case: Case) -> None:
    check(case)
