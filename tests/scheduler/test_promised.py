"""The GPUs of a job being preempted for a pending job are promised to that job while the victim
saves its checkpoint: no job before it in the order plans onto them, so the preemptor waits for
what its preemption frees instead of preempting a second victim."""

from __future__ import annotations

import pytest

from gpuqueue.scheduler.model import Node, ReasonCode, RunningJob
from gpuqueue.scheduler.preemption import VictimIndex
from tests.scheduler.builders import HOUR, NOW, Case, check, pending, running, team

TEAMS = (team("a", guarantee=8), team("b"), team("c", guarantee=8))
# Team b still borrows n2 with job 21.
B_BORROWS = running(21, "b", {"n2": 1}, gpus=8, started=NOW - 5 * HOUR)


def victim(for_job: int | None = 1, **kw: object) -> RunningJob:
    """Team b's job 20 on n1, asked 30 s ago to save a checkpoint within 600 s, for `for_job`."""
    fields: dict[str, object] = {
        "preempting_since": NOW - 30,
        "checkpoint_grace": 600,
        "preempted_for": for_job,
    }
    fields.update(kw)
    return running(20, "b", {"n1": 1}, gpus=8, started=NOW - 5 * HOUR, **fields)


def free(*names: str) -> tuple[Node, ...]:
    return tuple(Node(name, {"h100": 8}) for name in names)


CASES = [
    Case(
        "a preemptor waits for its victim still saving a checkpoint, and preempts no second victim",
        nodes=free("n1", "n2"),
        teams=TEAMS,
        running=(victim(), B_BORROWS),
        pending=(pending(1, "a", gpus=8),),
        admitted=set(),
        preempted={},
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
        waits_on={1: (20,)},
        withdrawn=set(),
    ),
    Case(
        "GPUs of a victim still saving a checkpoint are not taken by a job before its "
        "preemptor in the order",
        nodes=free("n1", "n2"),
        teams=TEAMS,
        running=(victim(), B_BORROWS),
        # Job 2 of team c comes first (older); it may not claim n1, so it reclaims n2 itself.
        pending=(pending(2, "c", gpus=8, submitted=NOW - HOUR), pending(1, "a", gpus=8)),
        admitted=set(),
        preempted={21: "reclaim"},
        waits_on={1: (20,), 2: (21,)},
        withdrawn=set(),
    ),
    Case(
        "a higher-priority job of the preemptor's team does not take the GPUs coming back for "
        "it: it reclaims borrowed GPUs of its own",
        nodes=free("n1", "n2"),
        teams=(team("a", guarantee=16), team("b"), team("c")),
        running=(victim(), B_BORROWS),
        pending=(pending(1, "a", gpus=8), pending(3, "a", gpus=8, priority=5)),
        admitted=set(),
        preempted={21: "reclaim"},
        waits_on={1: (20,), 3: (21,)},
    ),
    Case(
        "GPUs of a victim whose preemptor is no longer pending go to the first job to claim them",
        nodes=free("n1", "n2"),
        teams=TEAMS,
        running=(victim(for_job=99), B_BORROWS),
        pending=(pending(2, "c", gpus=8, submitted=NOW - HOUR), pending(1, "a", gpus=8)),
        preempted={21: "reclaim"},
        waits_on={2: (20,), 1: (21,)},
        withdrawn=set(),
    ),
    Case(
        "GPUs of a job preempted for no job (a drain) go to the first job to claim them",
        nodes=free("n1", "n2"),
        teams=TEAMS,
        running=(victim(for_job=None), B_BORROWS),
        pending=(pending(2, "c", gpus=8, submitted=NOW - HOUR), pending(1, "a", gpus=8)),
        preempted={21: "reclaim"},
        waits_on={2: (20,), 1: (21,)},
    ),
    Case(
        "a preemptor that fits on free GPUs starts there and leaves its victim's GPUs to the "
        "jobs after it",
        nodes=free("n1", "n2", "n3"),
        teams=TEAMS,
        running=(victim(), B_BORROWS),
        pending=(pending(1, "a", gpus=8), pending(2, "c", gpus=8)),
        admitted={1},
        placements={1: {"n3": 1}},
        preempted={},
        waits_on={2: (20,)},
        withdrawn=set(),
    ),
    Case(
        "a preemption whose preemptor starts on free GPUs and whose GPUs nobody claims is "
        "withdrawn",
        nodes=free("n1", "n2", "n3"),
        teams=TEAMS,
        running=(victim(), B_BORROWS),
        pending=(pending(1, "a", gpus=8),),
        admitted={1},
        placements={1: {"n3": 1}},
        withdrawn={20},
    ),
    Case(
        "a victim past its checkpoint deadline is still promised to its preemptor",
        nodes=free("n1", "n2"),
        teams=TEAMS,
        running=(victim(preempting_since=NOW - 700), B_BORROWS),
        pending=(pending(2, "c", gpus=8, submitted=NOW - HOUR), pending(1, "a", gpus=8)),
        preempted={21: "reclaim"},
        waits_on={1: (20,), 2: (21,)},
        withdrawn=set(),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_promised(case: Case) -> None:
    check(case)


def test_a_victim_being_preempted_is_never_a_candidate_again() -> None:
    # What keeps a job earlier in the order from taking the promised GPUs by its own victim
    # search: the victim is not offered twice.
    assert VictimIndex((victim(), B_BORROWS)).of("b", "h100") == [B_BORROWS]
