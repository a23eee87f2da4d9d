"""A flavor's idle policy in the engine: jobs flagged idle under "reclaim_first" are the first
borrowed work to go back (preemption.py, rule 1b); under "flag" the order is unchanged."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import pytest

from gpuqueue.scheduler.model import RunningJob
from tests.scheduler.builders import Case, check
from tests.scheduler.test_preemption import morning_grab


def idle_grab(idle: set[int], **want: object) -> dict[str, object]:
    """`morning_grab` (team a borrowed all 16 GPUs, team b asks for its guarantee of 8), with
    `idle`: the jobs flagged idle under reclaim_first."""
    scene = {**morning_grab(), **want}
    grab = cast(tuple[RunningJob, ...], scene["running"])
    scene["running"] = tuple(replace(job, idle_reclaim_first=job.id in idle) for job in grab)
    return scene


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
