"""GPUs of pods still terminating come back to the job they were taken for: its preemption is
not repeated on another victim while they do."""

from __future__ import annotations

import pytest

from gpuqueue.scheduler import forecast
from gpuqueue.scheduler.model import Draining, Node, ReasonCode
from tests.scheduler.builders import HOUR, NOW, Case, check, pending, running, team


def draining(name: str, job_id: int, for_job_id: int | None, gpus: int = 8) -> Node:
    """An 8-GPU node whose GPUs job `job_id`'s terminating pods still hold."""
    return Node(name, {"h100": 8}, draining=(Draining("h100", gpus, job_id, for_job_id),))


def free(name: str) -> Node:
    return Node(name, {"h100": 8})


# Team a (guarantee 8) preempted team b's job 20 for its job 1; job 20 was requeued and its pods
# on n1 are still terminating. Team b still borrows n2 with job 21.
B_BORROWS = running(21, "b", {"n2": 1}, gpus=8, started=NOW - 5 * HOUR)
TEAMS = (team("a", guarantee=8), team("b"), team("c", guarantee=8))

CASES = [
    Case(
        "a preemptor waits for the GPUs its victim's terminating pods hold, and preempts no "
        "second victim",
        nodes=(draining("n1", 20, 1), free("n2")),
        teams=TEAMS,
        running=(B_BORROWS,),
        pending=(pending(1, "a", gpus=8), pending(20, "b", gpus=8, submitted=NOW - 2 * HOUR)),
        admitted=set(),
        preempted={},
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION, 20: ReasonCode.NO_CAPACITY},
        waits_on={1: (20,)},
        numbers={1: {"gpus_back": 8, "from_teams": "b", "stopping": 1}},
        shares={("a", "h100"): 8},  # the returning GPUs count in the capacity shared
    ),
    Case(
        "GPUs coming back for a preemptor are not taken by a job before it in the order",
        nodes=(draining("n1", 20, 1), free("n2")),
        teams=TEAMS,
        running=(B_BORROWS,),
        # Job 2 of team c comes first (older); it may not claim n1, so it reclaims n2 itself.
        pending=(pending(2, "c", gpus=8, submitted=NOW - HOUR), pending(1, "a", gpus=8)),
        preempted={21: "reclaim"},
        waits_on={1: (20,), 2: (21,)},
    ),
    Case(
        "GPUs coming back for a job that is no longer pending go to the first job to claim them",
        nodes=(draining("n1", 20, 99), free("n2")),
        teams=TEAMS,
        running=(B_BORROWS,),
        pending=(pending(2, "c", gpus=8, submitted=NOW - HOUR), pending(1, "a", gpus=8)),
        preempted={21: "reclaim"},
        waits_on={2: (20,), 1: (21,)},
    ),
    Case(
        "a preemptor that fits on free GPUs starts there and leaves its returning GPUs to others",
        nodes=(draining("n1", 20, 1), free("n2"), free("n3")),
        teams=TEAMS,
        running=(B_BORROWS,),
        pending=(pending(1, "a", gpus=8), pending(2, "c", gpus=8)),
        admitted={1},
        placements={1: {"n3": 1}},
        preempted={},
        waits_on={2: (20,)},
    ),
    Case(
        "GPUs of terminating pods are never admitted onto",
        nodes=(draining("n1", 20, None),),
        teams=TEAMS,
        pending=(pending(1, "a", gpus=1),),
        admitted=set(),
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
        waits_on={1: (20,)},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_draining(case: Case) -> None:
    check(case)


def test_a_forecast_counts_the_returning_gpus_as_back_after_its_first_step() -> None:
    case = CASES[0]
    starts = forecast(case.snapshot(), case.policy)
    assert starts[1] is not None and starts[1] > NOW
