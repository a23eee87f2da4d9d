"""A flavor's idle policy in the engine: jobs flagged idle under "reclaim_first" are the first
borrowed work to go back (preemption.py, rule 1b); under "flag" the order is unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.scheduler.builders import HOUR, NOW, Case, check, nodes, pending, running, team


def idle_grab(idle: set[int], **want: object) -> dict[str, object]:
    """Team a borrowed all 16 GPUs with single-GPU jobs (later ids started later); team b,
    guarantee 8, asks for 8 on one node. `idle`: the jobs flagged idle under reclaim_first."""
    grab = tuple(
        replace(
            running(100 + i, "a", {"n1" if i < 8 else "n2": 1}, started=NOW - 2 * HOUR + 60 * i),
            idle_reclaim_first=100 + i in idle,
        )
        for i in range(16)
    )
    return {
        "nodes": nodes(2, h100=8),
        "teams": (team("a", guarantee=4, limit=16), team("b", guarantee=8, limit=16)),
        "running": grab,
        "pending": (pending(1, "b", workers=8),),
        **want,
    }


CASES = [
    Case(
        "without idle jobs reclaim takes the most recently started ones",
        **idle_grab(set(), preempted={100 + i: "reclaim" for i in range(8, 16)}),  # type: ignore[arg-type]
    ),
    Case(
        "idle borrowed jobs go first under reclaim_first, though they started earliest",
        **idle_grab({100 + i for i in range(8)}, preempted={100 + i: "reclaim" for i in range(8)}),  # type: ignore[arg-type]
    ),
    Case(
        "a few idle jobs go first, then the most recently started make up the rest",
        **idle_grab(
            {100, 101},
            preempted={  # type: ignore[arg-type]
                100: "reclaim",
                101: "reclaim",
                **{100 + i: "reclaim" for i in range(10, 16)},
            },
        ),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_idle_reclaim(case: Case) -> None:
    check(case)
