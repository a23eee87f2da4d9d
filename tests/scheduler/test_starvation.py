"""The starvation guard: reservations for jobs that waited too long, and backfill around them."""

from __future__ import annotations

import math

import pytest

from gpuqueue.scheduler.model import Policy, ReasonCode
from tests.scheduler.builders import HOUR, NOW, Case, check, nodes, pending, running, team


def draining(*queued: object, starving: bool = True, runtimes: bool = True) -> dict[str, object]:
    """n1 has 4 GPUs free and 4 held by a job ending in 1,000 s; n2 is full until 5,000 s.
    Job 1 (team c) wants a whole node and has waited two hours (or not)."""
    ends = {"max_runtime": HOUR + 1000} if runtimes else {}
    longer = {"max_runtime": HOUR + 5000} if runtimes else {}
    return {
        "nodes": nodes(2, h100=8),
        "teams": (team("a"), team("b"), team("c", guarantee=8)),
        "running": (
            running(10, "a", {"n1": 1}, gpus=4, preemptible=False, **ends),  # type: ignore[arg-type]
            running(11, "b", {"n2": 1}, gpus=8, preemptible=False, **longer),  # type: ignore[arg-type]
        ),
        "pending": (
            pending(1, "c", gpus=8, submitted=NOW - (2 * HOUR if starving else 100)),
            *queued,
        ),
    }


CASES = [
    Case(
        "a starving gang reserves the node that frees up soonest",
        **draining(),  # type: ignore[arg-type]
        reservations={1: ({"n1": 1}, NOW + 1000)},
        reasons={1: ReasonCode.RESERVED},
        numbers={1: {"expected_start": NOW + 1000, "nodes": 1, "team_holds_none": None}},
    ),
    Case(
        "nothing but a backfill job takes a reservation's GPUs",
        **draining(
            pending(2, "c", gpus=4, submitted=NOW - 50),
            pending(3, "c", gpus=4, submitted=NOW - 40, max_runtime=500),
        ),  # type: ignore[arg-type]
        admitted={3},
        placements={3: {"n1": 1}},
        # Job 3, predicted shorter, takes its turn first (rule 5) and the last free GPUs: job 2,
        # of unknown runtime, could not have backfilled anyway.
        reasons={2: ReasonCode.NO_CAPACITY},
        numbers={2: {"free": 0}},
    ),
    Case(
        "a backfill job that would run past the reservation's start waits",
        **draining(pending(3, "c", gpus=4, submitted=NOW - 40, max_runtime=2000)),  # type: ignore[arg-type]
        admitted=set(),
        reasons={3: ReasonCode.BEHIND_RESERVATION},
        numbers={3: {"expected_start": NOW + 1000}},
    ),
    Case(
        "a job that declares no max runtime backfills when twice its predicted runtime ends "
        "before the reservation's start",
        **draining(pending(3, "c", gpus=4, submitted=NOW - 40, expected_runtime=400)),  # type: ignore[arg-type]
        admitted={3},
        placements={3: {"n1": 1}},
    ),
    Case(
        "a declared expected runtime is the submitter's word, which nothing enforces: "
        "it does not backfill",
        **draining(pending(3, "c", gpus=4, submitted=NOW - 40, expected_runtime=60, declared=True)),  # type: ignore[arg-type]
        admitted=set(),
        reasons={3: ReasonCode.BEHIND_RESERVATION},
    ),
    Case(
        "a predicted backfill job whose margin runs past the reservation's start waits",
        **draining(pending(3, "c", gpus=4, submitted=NOW - 40, expected_runtime=600)),  # type: ignore[arg-type]
        admitted=set(),
        reasons={3: ReasonCode.BEHIND_RESERVATION},
    ),
    Case(
        "with backfill_prediction_factor=0 only a declared max runtime backfills",
        **draining(pending(3, "c", gpus=4, submitted=NOW - 40, expected_runtime=400)),  # type: ignore[arg-type]
        policy=Policy(backfill_prediction_factor=0),
        admitted=set(),
        reasons={3: ReasonCode.BEHIND_RESERVATION},
    ),
    Case(
        "a short predicted job backfills after a long one of the same kind was refused",
        **draining(
            pending(4, "c", gpus=2, submitted=NOW - 2000, expected_runtime=600),
            pending(3, "c", gpus=2, submitted=NOW - 40, expected_runtime=300),
        ),  # type: ignore[arg-type]
        admitted={3},
        reasons={4: ReasonCode.BEHIND_RESERVATION},
    ),
    Case(
        "a job younger than the starvation threshold gets no reservation",
        **draining(
            pending(2, "c", gpus=4, submitted=NOW - 50),
            pending(3, "c", gpus=4, submitted=NOW - 40),
            starving=False,
        ),  # type: ignore[arg-type]
        reservations={},
        admitted={2},
        reasons={1: ReasonCode.NO_CAPACITY, 3: ReasonCode.QUEUED_BEHIND_TEAM},
        numbers={3: {"ahead": 1}},
    ),
    Case(
        "a reservation's start is unknown when no running job has a known end",
        **draining(runtimes=False),  # type: ignore[arg-type]
        reservations={1: ({"n1": 1}, math.inf)},
    ),
    Case(
        "a starving job that would borrow beyond its team's share gets no reservation "
        "when the team already runs something",
        nodes=nodes(2, h100=8),
        teams=(team("a"), team("b"), team("c")),
        running=(
            running(10, "a", {"n1": 1}, gpus=3, preemptible=False, max_runtime=HOUR + 1000),
            running(12, "c", {"n1": 1}, gpus=1, preemptible=False, max_runtime=HOUR + 1000),
            running(11, "b", {"n2": 1}, gpus=8, preemptible=False, max_runtime=HOUR + 5000),
        ),
        pending=(pending(1, "c", gpus=8, submitted=NOW - 2 * HOUR),),
        shares={("c", "h100"): 6},
        reservations={},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "a team that holds nothing gets a reservation for its oldest job, "
        "even one bigger than its share",
        nodes=nodes(2, h100=8),
        teams=(team("a"), team("b"), team("c")),
        running=(
            running(10, "a", {"n1": 1}, gpus=4, preemptible=False, max_runtime=HOUR + 1000),
            running(11, "b", {"n2": 1}, gpus=8, preemptible=False, max_runtime=HOUR + 5000),
        ),
        pending=(
            pending(2, "c", gpus=8, submitted=NOW - HOUR - 10),
            pending(1, "c", gpus=8, submitted=NOW - 2 * HOUR),
        ),
        shares={("c", "h100"): 6},
        reservations={1: ({"n1": 1}, NOW + 1000)},
        reasons={1: ReasonCode.RESERVED, 2: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "without min_one_job a team that holds nothing gets no reservation beyond its share",
        nodes=nodes(2, h100=8),
        teams=(team("a"), team("b"), team("c")),
        running=(
            running(10, "a", {"n1": 1}, gpus=4, preemptible=False, max_runtime=HOUR + 1000),
            running(11, "b", {"n2": 1}, gpus=8, preemptible=False, max_runtime=HOUR + 5000),
        ),
        pending=(pending(1, "c", gpus=8, submitted=NOW - 2 * HOUR),),
        policy=Policy(min_one_job=False),
        shares={("c", "h100"): 6},
        reservations={},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "a starving job within its share goes before a younger job of a team ahead of it",
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=4), team("b", guarantee=4), team("c", guarantee=8)),
        running=(running(10, "c", {"n2": 1}, gpus=8, preemptible=False),),
        pending=(
            pending(2, "a", gpus=8, submitted=NOW - 100),
            pending(1, "b", gpus=4, submitted=NOW - 2 * HOUR),
        ),
        admitted={1},
        reservations={},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_starvation(case: Case) -> None:
    check(case)
