"""A job within its guarantee that cannot reclaim yet says who borrows and when reclaim can start.

Borrowers' jobs inside their minimum runtime may not be preempted; the reason gives the earliest
time by which enough of them are out of it for the whole gang (reclaim_wait.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.model import Policy, ReasonCode, RunningJob
from tests.scheduler.builders import NOW, Case, check, nodes, pending, running, team

MINUTE = 60.0


def borrowed(id: int, team: str, on: str, gpus: int, free_at: float | None) -> RunningJob:
    """A job of `gpus` GPUs on node `on`, protected until NOW + `free_at` (None: not protected),
    after a minimum runtime of 30 minutes."""
    if free_at is None:
        return running(id, team, {on: 1}, gpus=gpus)
    started = NOW + free_at - 30 * MINUTE
    return running(id, team, {on: 1}, gpus=gpus, started=started, min_runtime_until=NOW + free_at)


TEAMS = (team("a", guarantee=8), team("b", guarantee=8))
# Team b's four 4-GPU jobs: on n1 one unprotected, one protected 20 more minutes; on n2 10, 40.
PARTLY_PROTECTED = (
    borrowed(11, "b", "n1", 4, None),
    borrowed(12, "b", "n1", 4, 20 * MINUTE),
    borrowed(13, "b", "n2", 4, 10 * MINUTE),
    borrowed(14, "b", "n2", 4, 40 * MINUTE),
)

CASES = [
    Case(
        "borrowers still inside their minimum runtime: reclaim starts when the first is out",
        nodes=nodes(2, h100=8),
        teams=TEAMS,
        running=(borrowed(11, "b", "n1", 8, 20 * MINUTE), borrowed(12, "b", "n2", 8, 25 * MINUTE)),
        pending=(pending(1, "a", gpus=8),),
        admitted=set(),
        preempted={},
        reasons={1: ReasonCode.WAITING_FOR_RECLAIM},
        numbers={
            1: {
                "borrowers": "b",
                "borrowed": 8,
                "min_runtime_seconds": 1800,
                "reclaim_at": NOW + 20 * MINUTE,
                "free": 0,
                "workers": 1,
                "gpus_per_worker": 8,
            }
        },
    ),
    Case(
        "borrowers out of their minimum runtime are preempted at once, with no such reason",
        nodes=nodes(2, h100=8),
        teams=TEAMS,
        running=(borrowed(11, "b", "n1", 8, None), borrowed(12, "b", "n2", 8, None)),
        pending=(pending(1, "a", gpus=8),),
        preempted={12: "reclaim"},
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
    ),
    Case(
        "partly protected: a whole worker of 8 has room once one node is free, not sooner",
        nodes=nodes(2, h100=8),
        teams=TEAMS,
        running=PARTLY_PROTECTED,
        pending=(pending(1, "a", gpus=8),),
        reasons={1: ReasonCode.WAITING_FOR_RECLAIM},
        numbers={1: {"reclaim_at": NOW + 20 * MINUTE, "borrowers": "b", "borrowed": 8}},
    ),
    Case(
        "partly protected: two workers of 4 have room as soon as one more job is out",
        nodes=nodes(2, h100=8),
        teams=TEAMS,
        running=PARTLY_PROTECTED,
        pending=(pending(1, "a", workers=2, gpus=4),),
        reasons={1: ReasonCode.WAITING_FOR_RECLAIM},
        numbers={1: {"reclaim_at": NOW + 10 * MINUTE}},
    ),
    Case(
        "two borrowing teams are both named, with all they borrow",
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=16), team("b"), team("c")),
        running=(borrowed(11, "b", "n1", 8, 10 * MINUTE), borrowed(12, "c", "n2", 8, 20 * MINUTE)),
        pending=(pending(1, "a", workers=2, gpus=8),),
        reasons={1: ReasonCode.WAITING_FOR_RECLAIM},
        numbers={1: {"borrowers": "b, c", "borrowed": 16, "reclaim_at": NOW + 20 * MINUTE}},
    ),
    Case(
        "later jobs of the kind wait behind the first, which reclaims first",
        nodes=nodes(2, h100=8),
        teams=TEAMS,
        running=(borrowed(11, "b", "n1", 8, 20 * MINUTE), borrowed(12, "b", "n2", 8, 25 * MINUTE)),
        pending=tuple(pending(i, "a", gpus=8) for i in (1, 2, 3)),
        reasons={
            1: ReasonCode.WAITING_FOR_RECLAIM,
            2: ReasonCode.QUEUED_BEHIND_TEAM,
            3: ReasonCode.QUEUED_BEHIND_TEAM,
        },
        numbers={1: {"reclaim_at": NOW + 20 * MINUTE}, 2: {"ahead": 1}, 3: {"ahead": 2}},
    ),
    Case(
        "beyond its guarantee a job waits for capacity: it has no claim on borrowed GPUs",
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=4), team("b", guarantee=8)),
        running=(borrowed(11, "b", "n1", 8, 20 * MINUTE), borrowed(12, "b", "n2", 8, 25 * MINUTE)),
        pending=(pending(1, "a", gpus=8),),
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "with reclaim off the job waits for capacity",
        nodes=nodes(2, h100=8),
        teams=TEAMS,
        running=(borrowed(11, "b", "n1", 8, 20 * MINUTE), borrowed(12, "b", "n2", 8, 25 * MINUTE)),
        pending=(pending(1, "a", gpus=8),),
        policy=Policy(reclaim=False),
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "a team's own protected work does not make it a borrower",
        nodes=nodes(1, h100=8),
        teams=(team("a", guarantee=8),),
        running=(running(11, "a", {"n1": 1}, gpus=8, started=NOW - 60, priority=-1),),
        pending=(pending(1, "a", gpus=8, priority=1),),
        reasons={1: ReasonCode.NO_CAPACITY},
        preempted={},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reclaim_wait(case: Case) -> None:
    check(case)


def test_reclaim_starts_at_the_time_the_reason_gives() -> None:
    """Planned again at `reclaim_at`, the same cluster preempts for the job; a second earlier,
    it does not."""
    case = CASES[2]
    reclaim_at = check(case).pending[0].reason.numbers["reclaim_at"]
    assert isinstance(reclaim_at, float)
    at_the_time = plan(replace(case.snapshot(), now=reclaim_at))
    assert {p.job_id for p in at_the_time.preemptions} == {11, 12}
    assert plan(replace(case.snapshot(), now=reclaim_at - 1)).preemptions == ()
