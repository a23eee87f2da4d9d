"""A guarantee is reclaimed even when the only victims are bigger than the need, and the reason
says what holds it meanwhile."""

from __future__ import annotations

import pytest

from gpuqueue.core.reason_text import describe_reason, when
from gpuqueue.scheduler.model import ReasonCode
from tests.scheduler.builders import HOUR, NOW, Case, check, nodes, pending, running, team

# Six nodes of 8 H100s. Team a (guarantee 24) holds 16 in two 1 x 8 jobs; team b borrows the
# other 32 in two 2 x 8 gangs, started 5 hours ago. Both shares are 24: b holds 8 beyond its
# share, and either of its gangs is 16.
A_HOLDS = (running(10, "a", {"n1": 1}, gpus=8), running(11, "a", {"n2": 1}, gpus=8))


def gang(id: int, first: int, **kw: object) -> object:
    return running(
        id, "b", {f"n{first}": 1, f"n{first + 1}": 1}, gpus=8, started=NOW - 5 * HOUR, **kw
    )


CASES = [
    Case(
        "a team under its guarantee reclaims a borrower's 2 x 8 gang to start one 1 x 8 job",
        nodes=nodes(6, h100=8),
        teams=(team("a", guarantee=24, limit=48), team("b", limit=48)),
        running=(*A_HOLDS, gang(12, 3, checkpoint_grace=600), gang(13, 5, checkpoint_grace=600)),
        pending=(pending(1, "a", gpus=8),),
        shares={("a", "h100"): 24, ("b", "h100"): 24},
        admitted=set(),
        preempted={13: "reclaim"},  # the most recently started: rule 3 (job ids break the tie)
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
        numbers={1: {"gpus_back": 16, "from_teams": "b", "saving_until": NOW + 600}},
        waits_on={1: (13,)},
    ),
    Case(
        "a job waiting for a gang already saving its checkpoint says until when, and takes no "
        "second victim",
        nodes=nodes(6, h100=8),
        teams=(team("a", guarantee=24, limit=48), team("b", limit=48)),
        running=(
            *A_HOLDS,
            gang(12, 3, checkpoint_grace=600),
            gang(13, 5, checkpoint_grace=600, preempting_since=NOW - 60),
        ),
        pending=(pending(1, "a", gpus=8),),
        preempted={},
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
        numbers={1: {"gpus_back": 16, "from_teams": "b", "saving_until": NOW + 540}},
        waits_on={1: (13,)},
    ),
    Case(
        "reclaim for a guarantee takes a victim that keeps the borrower at its share first",
        nodes=nodes(6, h100=8),
        teams=(team("a", guarantee=24, limit=48), team("b", limit=48)),
        running=(
            *A_HOLDS,
            gang(12, 3),
            running(13, "b", {"n5": 1}, gpus=8, started=NOW - 5 * HOUR),
            running(14, "b", {"n6": 1}, gpus=8, started=NOW - 5 * HOUR),
        ),
        pending=(pending(1, "a", gpus=8),),
        preempted={14: "reclaim"},
    ),
    Case(
        "a job past its team's guarantee leaves the borrower its fair share, bigger victims too",
        nodes=nodes(6, h100=8),
        teams=(team("a", guarantee=16, limit=48), team("b", limit=48)),
        running=(*A_HOLDS, gang(12, 3), gang(13, 5)),
        pending=(pending(1, "a", gpus=8),),
        preempted={},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "reclaim for a guarantee leaves the victim team its own guarantee, and the reason says "
        "what blocks it",
        nodes=nodes(6, h100=8),
        teams=(team("a", guarantee=24, limit=48), team("b", guarantee=24, limit=48)),
        running=(*A_HOLDS, gang(12, 3), gang(13, 5)),
        pending=(pending(1, "a", gpus=8),),
        preempted={},
        reasons={1: ReasonCode.NO_CAPACITY},
        numbers={1: {"guarantee": 24, "guarantee_in_use": 16, "borrowed": 8, "takeable": 0}},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_guarantee_reclaim(case: Case) -> None:
    check(case)


def test_the_reason_names_the_gpus_coming_back_their_team_and_the_checkpoint_deadline() -> None:
    result = check(CASES[0])
    reason = result.pending[0].reason
    stored = {"code": reason.code.value, "numbers": dict(reason.numbers), "job_ids": [13]}
    assert describe_reason(stored) == (
        f"Freeing 16 h100 GPUs from b's job #13, which is saving a checkpoint until "
        f"{when(NOW + 600, seconds=True)}; then this job starts as 1 × 8."
    )


def test_the_reason_of_a_blocked_guarantee_says_what_blocks_it() -> None:
    result = check(CASES[-1])
    reason = result.pending[0].reason
    stored = {"code": reason.code.value, "numbers": dict(reason.numbers), "job_ids": []}
    assert describe_reason(stored).endswith(
        "It fits within its team's guarantee (16 of 24 h100 GPUs held), but reclaim finds no "
        "room: other teams hold 8 h100 GPUs beyond their guarantees, 0 of them in jobs it may "
        "preempt (the rest are not preemptible, still inside their minimum runtime, or would put "
        "their team below its own guarantee), and that does not free whole workers for the gang."
    )
