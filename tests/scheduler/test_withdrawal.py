"""A preemption whose GPUs nobody needs any more is withdrawn before the victim stops."""

from __future__ import annotations

import pytest

from gpuqueue.scheduler.model import ReasonCode
from tests.scheduler.builders import HOUR, NOW, Case, check, nodes, pending, running, team

TEAMS = (team("a", guarantee=8), team("b"), team("c", guarantee=8))


def victim(**kw: object) -> object:
    """Team b's job 20 on n1, asked 30 s ago to save a checkpoint within 600 s, for job 1."""
    fields: dict[str, object] = {
        "preempting_since": NOW - 30,
        "checkpoint_grace": 600,
        "preempted_for": 1,
    }
    fields.update(kw)
    return running(20, "b", {"n1": 1}, gpus=8, started=NOW - 5 * HOUR, **fields)


CASES = [
    Case(
        "a preemption whose preemptor started elsewhere is withdrawn",
        nodes=nodes(2, h100=8),
        teams=TEAMS,
        running=(victim(), running(1, "a", {"n2": 1}, gpus=8, started=NOW - 10)),
        withdrawn={20},
    ),
    Case(
        "a preemption whose preemptor fits on free GPUs now is withdrawn as it starts there",
        nodes=nodes(2, h100=8),
        teams=TEAMS,
        running=(victim(),),
        pending=(pending(1, "a", gpus=8),),
        admitted={1},
        placements={1: {"n2": 1}},
        withdrawn={20},
    ),
    Case(
        "a preemption its preemptor still waits for is kept",
        nodes=nodes(1, h100=8),
        teams=TEAMS,
        running=(victim(),),
        pending=(pending(1, "a", gpus=8),),
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
        withdrawn=set(),
    ),
    Case(
        "a preemption whose GPUs another job claims is kept",
        nodes=nodes(1, h100=8),
        teams=TEAMS,
        running=(victim(),),
        pending=(pending(2, "c", gpus=4),),
        reasons={2: ReasonCode.WAITING_FOR_PREEMPTION},
        waits_on={2: (20,)},
        withdrawn=set(),
    ),
    Case(
        "a preemption past its checkpoint deadline is not withdrawn: the victim is stopping",
        nodes=nodes(2, h100=8),
        teams=TEAMS,
        running=(victim(preempting_since=NOW - 700),),
        withdrawn=set(),
    ),
    Case(
        "a job preempted for no job (a drain) is never withdrawn",
        nodes=nodes(2, h100=8),
        teams=TEAMS,
        running=(victim(preempted_for=None),),
        withdrawn=set(),
    ),
    Case(
        "of two victims on one node where one is claimed, the older is withdrawn",
        nodes=nodes(1, h100=8),
        teams=TEAMS,
        running=(
            running(
                20,
                "b",
                {"n1": 1},
                gpus=4,
                started=NOW - 5 * HOUR,
                preempting_since=NOW - 30,
                checkpoint_grace=600,
                preempted_for=9,
            ),
            running(
                21,
                "b",
                {"n1": 1},
                gpus=4,
                started=NOW - 2 * HOUR,
                preempting_since=NOW - 30,
                checkpoint_grace=600,
                preempted_for=9,
            ),
        ),
        pending=(pending(2, "c", gpus=4),),
        withdrawn={20},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_withdrawal(case: Case) -> None:
    check(case)
