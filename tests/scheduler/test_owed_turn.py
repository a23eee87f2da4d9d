"""An owed team with no guarantee of a flavor (ordering.py, rule 1) while teams below their
guarantee wait there for jobs within it (their claims): the guarantee comes first, and the owed
team has its turn on what the claims leave.

Team b has no guarantee and weight 0 (its fair share is 0 whatever is free), holds nothing and
owes nothing. Team c (no guarantee) borrows with a backlog of one-GPU jobs, its fair share all
that others leave. Team a, holding nothing, asks one job within its guarantee. In the queues'
order b comes last: its only turn is the owed one, and c's backlog takes every GPU the claim
leaves.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.model import Snapshot
from tests.scheduler.builders import HOUR, NOW, nodes, pending, running, team

OWED = 1  # team b's job


CLAIM = 10  # team a's job


def cluster(free: int, claim: int, owed_gpus: int = 1) -> Snapshot:
    """One node of 8 GPUs, `free` of them free, the rest held by team c; team a (guarantee 4,
    holding nothing) asks one job of `claim` GPUs (none: 0), team b one job of `owed_gpus`
    submitted ten minutes ago, before a's, c's eight one-GPU jobs (ids 50..)."""
    teams = (team("a", guarantee=4), team("b", weight=0.0), team("c"))
    held = tuple(running(100 + i, "c", {"n1": 1}, started=NOW - HOUR) for i in range(8 - free))
    claims = (pending(CLAIM, "a", gpus=claim, submitted=NOW - 60),) if claim else ()
    backlog = tuple(pending(50 + i, "c", submitted=NOW - 120) for i in range(8))
    owed = pending(OWED, "b", gpus=owed_gpus, submitted=NOW - 600)
    balance = {(t, "h100"): 0.0 for t in "abc"}
    return Snapshot(
        NOW, nodes(1, h100=8), teams, held, (owed, *claims, *backlog), share_balance=balance
    )


def admitted(snapshot: Snapshot) -> set[int]:
    return {a.job_id for a in plan(snapshot).admissions}


def test_the_owed_team_has_its_turn_where_the_free_gpus_hold_the_claim_too() -> None:
    """Four GPUs free, a claim of one: b's job starts, not a fourth borrowed job of c (the turn
    denied for any claim of the flavor left b behind c's backlog cycle after cycle)."""
    got = admitted(cluster(free=4, claim=1))
    assert {CLAIM, OWED} <= got


def test_the_owed_team_takes_nothing_a_claim_within_its_guarantee_needs() -> None:
    """Two GPUs free, a claim of two: they are the claim's (b would be reclaimed for it)."""
    got = admitted(cluster(free=2, claim=2))
    assert got == {CLAIM}


@settings(max_examples=80, deadline=None)
@given(free=st.integers(0, 8), claim=st.integers(0, 4), owed_gpus=st.integers(1, 3))
def test_guarantees_first_and_the_owed_team_on_what_they_leave(
    free: int, claim: int, owed_gpus: int
) -> None:
    """Whatever is free: the claim starts whenever the free GPUs hold it (the owed team never
    takes a GPU a guarantee needs), and the owed job whenever they hold the claim and it."""
    got = admitted(cluster(free, claim, owed_gpus))
    assert (CLAIM in got) is (0 < claim <= free)
    assert (OWED in got) is (free >= claim + owed_gpus)
