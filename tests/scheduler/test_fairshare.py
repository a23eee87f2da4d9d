"""Fair share: guarantees first, then idle GPUs by weight, capped by limit and demand;
departments share first, then their teams."""

from __future__ import annotations

import pytest

from gpuqueue.scheduler.fairshare import Claim, water_fill
from gpuqueue.scheduler.model import ReasonCode
from tests.scheduler.builders import Case, check, node, nodes, pending, running, team

CASES = [
    Case(
        "each team gets its guarantee first, then idle GPUs by weight",
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=4, weight=1), team("b", guarantee=4, weight=3)),
        pending=(pending(1, "a", workers=16), pending(2, "b", workers=16)),
        shares={("a", "h100"): 6, ("b", "h100"): 10},
    ),
    Case(
        "a team's share never exceeds what it asks for",
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=8), team("b")),
        pending=(pending(1, "a", workers=2), pending(2, "b", workers=100)),
        shares={("a", "h100"): 2, ("b", "h100"): 14},
    ),
    Case(
        "a team's share never exceeds its limit, whatever its weight",
        nodes=nodes(2, h100=8),
        teams=(team("a", limit=4, weight=10), team("b")),
        pending=(pending(1, "a", workers=16), pending(2, "b", workers=16)),
        shares={("a", "h100"): 4, ("b", "h100"): 12},
    ),
    Case(
        "a team that asks for nothing gets no share",
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=8), team("b")),
        pending=(pending(2, "b", workers=16),),
        shares={("a", "h100"): 0, ("b", "h100"): 16},
    ),
    Case(
        "running jobs count as demand as much as pending ones",
        nodes=nodes(2, h100=8),
        teams=(team("a"), team("b")),
        running=(running(10, "a", {"n1": 8}),),
        pending=(pending(2, "b", workers=16),),
        shares={("a", "h100"): 8, ("b", "h100"): 8},
    ),
    Case(
        "GPUs left over by rounding go to the largest fraction, then the team id",
        nodes=(node("n1", h100=10),),
        teams=(team("a"), team("b"), team("c")),
        pending=tuple(pending(i, t, workers=10) for i, t in enumerate("abc", start=1)),
        shares={("a", "h100"): 4, ("b", "h100"): 3, ("c", "h100"): 3},
    ),
    Case(
        "guarantees bigger than the flavor are scaled down to fit it",
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b", guarantee=8)),
        pending=(pending(1, "a", workers=8), pending(2, "b", workers=8)),
        shares={("a", "h100"): 4, ("b", "h100"): 4},
    ),
    Case(
        "cordoned nodes and GPUs used by others are not shared out",
        nodes=(node("n1", h100=8, external=2), node("n2", h100=8, schedulable=False)),
        teams=(team("a"),),
        pending=(pending(1, "a", workers=16),),
        shares={("a", "h100"): 6},
    ),
    Case(
        "departments share the flavor first, then their teams share the department's part",
        nodes=nodes(4, h100=8),
        teams=(
            team("x", guarantee=16),
            team("y", guarantee=16),
            team("x1", guarantee=8, parent="x"),
            team("x2", parent="x"),
            team("y1", parent="y"),
        ),
        pending=(
            pending(1, "x1", workers=32),
            pending(2, "x2", workers=32),
            pending(3, "y1", workers=32),
        ),
        shares={
            ("x", "h100"): 16,
            ("y", "h100"): 16,
            ("x1", "h100"): 12,
            ("x2", "h100"): 4,
            ("y1", "h100"): 16,
        },
    ),
    Case(
        "an idle department's share goes to the busy one",
        nodes=nodes(4, h100=8),
        teams=(
            team("x", guarantee=16),
            team("y", guarantee=16),
            team("x1", parent="x"),
            team("y1", parent="y"),
        ),
        pending=(pending(3, "y1", workers=32),),
        shares={("x", "h100"): 0, ("y", "h100"): 32, ("y1", "h100"): 32},
    ),
    Case(
        "a department's limit stops its teams even below their own limits",
        nodes=nodes(2, h100=8),
        teams=(team("d", limit=8), team("t1", parent="d"), team("t2", parent="d")),
        running=(running(10, "t1", {"n1": 6}),),
        pending=(pending(1, "t2", workers=4),),
        admitted=set(),
        reasons={1: ReasonCode.OVER_LIMIT},
        numbers={1: {"scope": "department", "limit": 8, "in_use": 6, "requested": 4}},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fair_share(case: Case) -> None:
    check(case)


def test_water_fill_never_hands_out_more_than_there_is() -> None:
    claims = [Claim("a", 3, 10, 1.0), Claim("b", 3, 10, 2.0), Claim("c", 0, 1, 5.0)]
    shares = water_fill(7, claims)
    assert sum(shares.values()) == 7
    assert shares["c"] <= 1
