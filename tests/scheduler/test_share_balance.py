"""Time-based fair share (usage.py): the balances and the rules that read them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.model import (
    PendingJob,
    PlacementStrategy,
    Policy,
    Quota,
    ReasonCode,
    RunningJob,
    Snapshot,
    Team,
)
from gpuqueue.scheduler.usage import ShareBalance, entitled_shares, seconds_to_recover
from tests.scheduler.builders import HOUR, NOW, Case, check, nodes, pending, running, team

# A team holds a GPU for a slice of an hour's worth of its GPUs before it owes enough to yield.
SLICE = Policy().share_slice_seconds
BORROW = Policy().share_borrow_debt_seconds


def crowded(**changes: object) -> dict[str, object]:
    """Team b (guarantee 8) holds the whole cluster (two nodes, 16 single-GPU jobs that ran five
    hours, past Policy.reclaim_min_runtime_seconds); team a (weight 0: its share is 0) waits
    with one 8-GPU gang submitted a minute ago; team c (guarantee 8) asks for a 16-GPU gang,
    which is more than its share of 8."""
    fields: dict[str, object] = {
        "nodes": nodes(2, h100=8),
        "teams": (team("a", weight=0.0), team("b", guarantee=8), team("c", guarantee=8)),
        "running": tuple(
            running(100 + i, "b", {"n1" if i < 8 else "n2": 1}, started=NOW - 5 * HOUR)
            for i in range(16)
        ),
        "pending": (
            pending(1, "a", gpus=8, submitted=NOW - 60),
            pending(2, "c", workers=2, gpus=8),
        ),
    }
    fields.update(changes)
    return fields


def lone_gpu(balance: float, guarantee: int = 0) -> dict[str, object]:
    """Team a (weight 0: share 0) runs one 1-GPU job that ran five hours; team b runs 8
    non-preemptible GPUs on n2 and 7 on n1, and asks for one more, within its share."""
    return {
        "nodes": nodes(2, h100=8),
        "teams": (team("a", weight=0.0), team("b", guarantee=guarantee, limit=16)),
        "running": (
            running(10, "a", {"n1": 1}, started=NOW - 5 * HOUR),
            running(11, "b", {"n1": 7}, preemptible=False),
            running(12, "b", {"n2": 1}, gpus=8, preemptible=False),
        ),
        "pending": (pending(1, "b"),),
        "balance": {("a", "h100"): balance},
    }


def borrower(balance: float, held: int = 2) -> dict[str, object]:
    """Team a (guarantee 2, share 2) holds `held` GPUs and asks for one more; team b (guarantee
    6, share 6) holds 4 and waits with a 4-GPU job that does not fit the 2 free GPUs."""
    return {
        "nodes": nodes(1, h100=8),
        "teams": (team("a", guarantee=2), team("b", guarantee=6)),
        "running": (
            running(10, "a", {"n1": held}),
            running(11, "b", {"n1": 1}, gpus=4),
        ),
        "pending": (pending(1, "a"), pending(2, "b", gpus=4)),
        "balance": {("a", "h100"): balance},
        "shares": {("a", "h100"): 2, ("b", "h100"): 6},
    }


def spread(balance: float) -> dict[str, object]:
    """Team a (guarantee 2, weight 0: share 2) holds 2 GPUs of n1 and asks for one more, team b
    holds 1 GPU of n1 and asks for a 2 x 8 gang beyond its share; n2 is empty, and placement
    spreads (the emptiest node first)."""
    return {
        "nodes": nodes(2, h100=8),
        "teams": (team("a", guarantee=2, weight=0.0), team("b", guarantee=6)),
        "running": (running(10, "a", {"n1": 2}), running(11, "b", {"n1": 1})),
        "pending": (pending(1, "a"), pending(2, "b", workers=2, gpus=8)),
        "balance": {("a", "h100"): balance},
        "policy": Policy(placement=PlacementStrategy.SPREAD),
    }


def empty_node(balance: float) -> dict[str, object]:
    """Team a (guarantee 2, weight 0: share 2) holds 2 GPUs of n1, team b the other 6 and asks
    for a 2 x 8 gang beyond its share; the only free GPUs are the empty n2."""
    return {
        "nodes": nodes(2, h100=8),
        "teams": (team("a", guarantee=2, weight=0.0), team("b", guarantee=6)),
        "running": (running(10, "a", {"n1": 2}), running(11, "b", {"n1": 1}, gpus=6)),
        "pending": (pending(1, "a"), pending(2, "b", workers=2, gpus=8)),
        "balance": {("a", "h100"): balance},
        "shares": {("a", "h100"): 2, ("b", "h100"): 14},
    }


def reclaiming(balance: float) -> dict[str, object]:
    """Team a (guarantee 2, weight 0: share 2) holds 2 GPUs of n1 and asks for one more; team b
    (guarantee 8) holds 4 of n1 and waits with a 4-GPU job within its guarantee that the 2 free
    GPUs of n1 do not hold; team c borrows the whole of n2 with jobs inside their minimum
    runtime, so b waits to reclaim them."""
    return {
        "nodes": nodes(2, h100=8),
        "teams": (team("a", guarantee=2, weight=0.0), team("b", guarantee=8), team("c")),
        "running": (
            running(10, "a", {"n1": 2}),
            running(11, "b", {"n1": 1}, gpus=4),
            *(running(20 + i, "c", {"n2": 1}, started=NOW - 60) for i in range(8)),
        ),
        "pending": (pending(1, "a"), pending(2, "b", gpus=4, submitted=NOW - 60)),
        "balance": {("a", "h100"): balance},
    }


def backfill(balance: float) -> dict[str, object]:
    """Team b (guarantee 4) holds nothing and its 8-GPU job starves: it reserves n1, where team
    c's 4 non-preemptible GPUs end in 1,000 s; team a (no share) asks for one GPU for at most
    500 s: a backfill onto the reserved GPUs."""
    return {
        "nodes": nodes(1, h100=8),
        "teams": (team("a", weight=0.0), team("b", guarantee=4), team("c", guarantee=4)),
        "running": (
            running(10, "c", {"n1": 1}, gpus=4, preemptible=False, max_runtime=HOUR + 1000),
        ),
        "pending": (
            pending(1, "b", gpus=8, submitted=NOW - 2 * HOUR),
            pending(2, "a", max_runtime=500),
        ),
        "balance": {("a", "h100"): balance},
    }


def one_reservation(owed: Team, c_guarantee: int = 8) -> dict[str, object]:
    """Team b holds both nodes with non-preemptible jobs (n1 frees first); team c's gang, within
    its guarantee (or, with none, within its fair share: it then holds 2 GPUs of a third node),
    has starved for two hours; team `a` holds nothing, owes nothing and asks for a whole node a
    minute ago. Only one reservation may be held."""
    running_jobs: tuple[RunningJob, ...] = (
        running(10, "b", {"n1": 1}, gpus=8, preemptible=False, max_runtime=HOUR + 1000),
        running(11, "b", {"n2": 1}, gpus=8, preemptible=False, max_runtime=HOUR + 5000),
    )
    if not c_guarantee:
        running_jobs += (
            running(12, "c", {"n3": 1}, gpus=2, preemptible=False, max_runtime=HOUR + 9000),
        )
    return {
        "nodes": nodes(2 if c_guarantee else 3, h100=8),
        "teams": (owed, team("b", guarantee=4), team("c", guarantee=c_guarantee)),
        "running": running_jobs,
        "pending": (
            pending(1, "c", gpus=8, submitted=NOW - 2 * HOUR),
            pending(2, "a", gpus=8, submitted=NOW - 60),
        ),
        "balance": {},
        "policy": Policy(max_reservations=1),
    }


CASES = [
    Case(
        "a team that holds nothing and owes nothing reclaims for its first gang at once",
        **crowded(balance={}),  # type: ignore[arg-type]
        shares={("a", "h100"): 0},
        preempted={i: "reclaim" for i in range(108, 116)},
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
    ),
    Case(
        "without a history the same gang waits its hour, as before",
        **crowded(),  # type: ignore[arg-type]
        preempted={},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "the policy can turn time-based fair share off even with a history",
        **crowded(balance={}),  # type: ignore[arg-type]
        policy=Policy(time_based_share=False),
        preempted={},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "a team in debt by half a slice of its gang waits for its balance to recover",
        **crowded(balance={("a", "h100"): -SLICE / 2 * 8 - 1}),  # type: ignore[arg-type]
        preempted={},
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "a team in debt by less than half a slice of its gang still reclaims",
        **crowded(balance={("a", "h100"): -SLICE / 2 * 8 + 1}),  # type: ignore[arg-type]
        preempted={i: "reclaim" for i in range(108, 116)},
    ),
    Case(
        "a team in debt gets no reservation after its hour either",
        **crowded(  # type: ignore[arg-type]
            balance={("a", "h100"): -SLICE * 8},
            pending=(pending(1, "a", gpus=8, submitted=NOW - 2 * HOUR),),
        ),
        preempted={},
        reservations={},
    ),
    Case(
        "a team within a slice of its share's debt borrows free GPUs",
        **borrower(balance=-BORROW * 2 + 1),  # type: ignore[arg-type]
        admitted={1},
        borrowed={1: True},
    ),
    Case(
        "the first gang of a team with no guarantee that holds nothing and owes nothing "
        "takes the last reservation before older starving jobs",
        **one_reservation(team("a", weight=0.0), c_guarantee=0),  # type: ignore[arg-type]
        reservations={2: ({"n1": 1}, NOW + 1000)},
        reasons={2: ReasonCode.RESERVED},
        numbers={2: {"team_holds_none": 1}},  # starving for that, not for its wait
    ),
    Case(
        "but not before a gang within its team's guarantee: the guarantee comes first",
        **one_reservation(team("a", weight=0.0)),  # type: ignore[arg-type]
        reservations={1: ({"n1": 1}, NOW + 1000)},
        reasons={1: ReasonCode.RESERVED},
    ),
    Case(
        "a team with a guarantee, owed a gang bigger than its share, keeps its place in time",
        **one_reservation(team("a", guarantee=4)),  # type: ignore[arg-type]
        shares={("a", "h100"): 4},
        reservations={1: ({"n1": 1}, NOW + 1000)},
        reasons={1: ReasonCode.RESERVED},
    ),
    Case(
        "a team in debt by a slice of its share still borrows free GPUs of a node in use",
        **borrower(balance=-BORROW * 2 - 1),  # type: ignore[arg-type]
        admitted={1},
        borrowed={1: True},
    ),
    Case(
        "a team in debt borrows no GPU of an empty node: a gang may need it whole",
        **empty_node(balance=-BORROW * 2 - 1),  # type: ignore[arg-type]
        admitted=set(),
        reasons={1: ReasonCode.IN_SHARE_DEBT},
    ),
    Case(
        "a team not in debt borrows the empty node",
        **empty_node(balance=-BORROW * 2 + 1),  # type: ignore[arg-type]
        admitted={1},
        borrowed={1: True},
    ),
    Case(
        "a team in debt borrows on the node in use even where placement spreads",
        **spread(balance=-BORROW * 2 - 1),  # type: ignore[arg-type]
        placements={1: {"n1": 1}},
        borrowed={1: True},
    ),
    Case(
        "a team not in debt spreads to the empty node",
        **spread(balance=-BORROW * 2 + 1),  # type: ignore[arg-type]
        placements={1: {"n2": 1}},
        borrowed={1: True},
    ),
    Case(
        "a team in debt borrows no GPU while another team waits within its guarantee",
        **reclaiming(balance=-BORROW * 2 - 1),  # type: ignore[arg-type]
        admitted=set(),
        reasons={1: ReasonCode.IN_SHARE_DEBT, 2: ReasonCode.WAITING_FOR_RECLAIM},
        numbers={1: {"guaranteed_team": "b"}},
    ),
    Case(
        "a team not in debt borrows the free GPUs the waiting team's job does not fit",
        **reclaiming(balance=-BORROW * 2 + 1),  # type: ignore[arg-type]
        admitted={1},
        borrowed={1: True},
    ),
    Case(
        "a team in debt does not backfill onto GPUs reserved for another team",
        **backfill(balance=-BORROW - 1),  # type: ignore[arg-type]
        admitted=set(),
        reasons={1: ReasonCode.RESERVED, 2: ReasonCode.IN_SHARE_DEBT},
    ),
    Case(
        "a team not in debt backfills",
        **backfill(balance=-BORROW + 1),  # type: ignore[arg-type]
        admitted={2},
    ),
    Case(
        "a team in debt still gets GPUs within its share",
        **borrower(balance=-BORROW * 2 - 1, held=1),  # type: ignore[arg-type]
        admitted={1},
        borrowed={1: False},
    ),
    Case(
        "the last job of a team with no share is kept while the team is not in debt",
        **lone_gpu(balance=-SLICE + 1),  # type: ignore[arg-type]
        preempted={},
    ),
    Case(
        "the last job of a team with no share is reclaimed once the team owes a slice of it",
        **lone_gpu(balance=-SLICE - 1),  # type: ignore[arg-type]
        preempted={10: "reclaim"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_share_balance_rules(case: Case) -> None:
    check(case)


def test_entitled_shares_split_the_rest_by_weight_and_keep_fractions() -> None:
    quotas = {"a": Quota(4, 10), "b": Quota(0, 10), "c": Quota(0, 10, 2.0), "d": Quota(4, 10)}
    shares = entitled_shares(10, {"a": 6, "b": 5, "c": 5, "d": 1}, quotas)
    # Guarantees first (a 4, d the 1 it asks); the 5 left by weight, 5/4 a weight: a 4 + 5/4
    # (below the 6 it asks), b 5/4, c 5/2.
    assert shares["d"] == 1
    assert math.isclose(shares["a"], 4 + 5 / 4)
    assert math.isclose(shares["b"], 5 / 4)
    assert math.isclose(shares["c"], 5 / 2)
    assert math.isclose(sum(shares.values()), 10)


def test_a_balance_grows_only_while_a_team_is_entitled_to_more_than_it_holds() -> None:
    teams = (team("a"), team("b", guarantee=8))
    meter = ShareBalance(teams, {"h100": 8}, half_life_seconds=0)
    meter.advance(0, {}, {})
    # b's guarantee is the whole flavor and b asks for more than it: a is entitled to nothing.
    meter.advance(HOUR, {("b", "h100"): 8}, {("a", "h100"): 8, ("b", "h100"): 8})
    assert meter.snapshot() == {}
    # b gone: a is entitled to all 8 and held none for an hour.
    meter.advance(2 * HOUR, {}, {("a", "h100"): 8})
    assert meter.snapshot() == {("a", "h100"): 8 * HOUR}
    # a holds what it asks: entitled to what it holds, the balance stays.
    meter.advance(3 * HOUR, {("a", "h100"): 8}, {})
    assert meter.snapshot() == {("a", "h100"): 8 * HOUR}


def test_a_fractional_share_against_a_whole_gpu() -> None:
    """a (no guarantee) and b (guarantee 7) share 8 GPUs while both ask for more: a is entitled
    to half of the one GPU above b's guarantee. Holding a whole GPU for an hour puts it half
    an hour in debt; waiting an hour with nothing gives that back."""
    teams = (team("a"), team("b", guarantee=7))
    meter = ShareBalance(teams, {"h100": 8}, half_life_seconds=0)
    meter.advance(0, {}, {})
    meter.advance(HOUR, {("a", "h100"): 1, ("b", "h100"): 7}, {("b", "h100"): 8})
    assert meter.snapshot()[("a", "h100")] == pytest.approx(-HOUR / 2)
    meter.advance(2 * HOUR, {("b", "h100"): 8}, {("a", "h100"): 1, ("b", "h100"): 8})
    assert meter.snapshot().get(("a", "h100"), 0.0) == pytest.approx(0.0)


def test_balances_decay_with_the_half_life() -> None:
    teams = (team("a"),)
    meter = ShareBalance(teams, {"h100": 8}, half_life_seconds=HOUR)
    meter.advance(0, {}, {})
    meter.balance[("a", "h100")] = 1000.0
    meter.advance(HOUR, {}, {})
    assert meter.snapshot()[("a", "h100")] == pytest.approx(500.0)
    meter.advance(20 * HOUR, {}, {})
    assert meter.snapshot() == {}  # below a GPU-second: forgotten


def test_stored_balances_resume_from_their_time() -> None:
    """The live cycle starts from the balances and the time it stored: the same as one meter
    that never stopped."""
    teams = (team("a"),)
    kept = ShareBalance(teams, {"h100": 8}, half_life_seconds=HOUR)
    kept.advance(0, {}, {})
    kept.advance(HOUR, {}, {("a", "h100"): 8})
    resumed = ShareBalance(teams, {"h100": 8}, HOUR, balance=kept.snapshot(), last=HOUR)
    kept.advance(2 * HOUR, {}, {("a", "h100"): 8})
    resumed.advance(2 * HOUR, {}, {("a", "h100"): 8})
    assert resumed.snapshot() == kept.snapshot()


def test_after_a_gap_only_the_credited_interval_counts_but_the_whole_gap_decays() -> None:
    teams = (team("a"),)
    meter = ShareBalance(teams, {"h100": 8}, HOUR, balance={("a", "h100"): 1000.0}, last=0)
    meter.advance(HOUR, {}, {("a", "h100"): 8}, max_credit_seconds=60)
    rate = math.log(2) / HOUR
    credit = 8 * (1 - math.exp(-rate * 60)) / rate  # 8 GPUs owed over the last minute only
    assert meter.snapshot()[("a", "h100")] == pytest.approx(500.0 + credit)
    assert credit == pytest.approx(8 * 60, rel=0.01)


@pytest.mark.parametrize(
    ("debt", "threshold", "half_life", "credit", "wait"),
    [
        (100.0, 200.0, HOUR, 0.0, 0.0),  # under the threshold already
        (400.0, 100.0, HOUR, 0.0, 2 * HOUR),  # two halvings
        (400.0, 0.0, HOUR, 0.0, math.inf),  # no threshold to fall under
        (400.0, 100.0, 0.0, 0.0, math.inf),  # no decay
        (400.0, 100.0, 0.0, 0.1, 3000.0),  # no decay, 0.1 GPU owed: 300 GPU-seconds in 3000 s
        (400.0, 0.0, 0.0, 0.1, 4000.0),  # and the whole debt paid back
    ],
)
def test_seconds_to_recover(
    debt: float, threshold: float, half_life: float, credit: float, wait: float
) -> None:
    assert seconds_to_recover(debt, threshold, half_life, credit) == pytest.approx(wait)


@settings(max_examples=200, deadline=None)
@given(
    start=st.floats(-1e6, 1e6).filter(lambda b: abs(b) >= 10),
    bound=st.floats(-1e6, 1e6).filter(lambda b: abs(b) >= 10),
    held=st.integers(0, 16),
    asked=st.integers(0, 16),
    half_life=st.sampled_from([0.0, HOUR, 86400.0]),
)
def test_a_balance_reaches_a_bound_when_crossing_says(
    start: float, bound: float, held: int, asked: int, half_life: float
) -> None:
    """`crossing` (the forecast's balance events) against `advance` (the cycle's balances):
    advanced that long with the state standing, the balance sits on the bound; when it says
    never, a hundred half-lives (or 1,000 days without decay) leave it on its side."""
    key = ("a", "h100")
    teams = (team("a", guarantee=4), team("b", guarantee=4))
    state = ({key: held}, {key: asked, ("b", "h100"): 8})
    meter = ShareBalance(teams, {"h100": 16}, half_life, {key: start}, NOW)
    gap = meter.gaps(*state).get(key, 0.0)  # 0 when it neither holds nor asks
    after = meter.crossing(key, bound, gap)
    if after < math.inf:
        meter.advance(NOW + after, *state)
        assert meter.snapshot().get(key, 0.0) == pytest.approx(bound, rel=1e-6, abs=1e-3)
    else:
        meter.advance(NOW + (100 * half_life or 1000 * 86400.0), *state)
        assert (meter.snapshot().get(key, 0.0) < bound) == (start < bound)


@settings(max_examples=200, deadline=None)
@given(
    a_jobs=st.lists(st.integers(0, 1), max_size=6),  # a's 1-GPU jobs, on n1 or n2
    b_guarantee=st.integers(1, 8),
    b_held=st.integers(0, 8),
    b_asks=st.integers(1, 8),
    c_jobs=st.lists(st.tuples(st.integers(0, 1), st.integers(1, 4), st.booleans()), max_size=4),
    a_asks=st.lists(st.integers(1, 4), min_size=1, max_size=4),
)
def test_a_team_in_debt_borrows_nothing_while_another_waits_within_its_guarantee(
    a_jobs: list[int],
    b_guarantee: int,
    b_held: int,
    b_asks: int,
    c_jobs: list[tuple[int, int, bool]],
    a_asks: list[int],
) -> None:
    """Team a (no share) is deep in debt; team b waits with one job within its guarantee. While
    that job is neither admitted nor has claimed GPUs being freed for it (reclaim), none of a's
    jobs is admitted (whatever is free and wherever)."""
    b_held = min(b_held, b_guarantee - 1)
    b_asks = min(b_asks, b_guarantee - b_held)
    free = {"n1": 8, "n2": 8}
    jobs = []
    for i, node in enumerate(a_jobs):
        name = f"n{node + 1}"
        if free[name]:
            free[name] -= 1
            jobs.append(running(100 + i, "a", {name: 1}))
    if b_held and free["n1"] >= b_held:
        free["n1"] -= b_held
        jobs.append(running(200, "b", {"n1": 1}, gpus=b_held, preemptible=False))
    for i, (node, gpus, recent) in enumerate(c_jobs):  # recent: inside its minimum runtime
        name = f"n{node + 1}"
        if free[name] >= gpus:
            free[name] -= gpus
            started = NOW - 60 if recent else NOW - HOUR
            jobs.append(running(300 + i, "c", {name: 1}, gpus=gpus, started=started))
    snapshot = Snapshot(
        NOW,
        nodes(2, h100=8),
        (team("a", weight=0.0), team("b", guarantee=b_guarantee), team("c")),
        tuple(jobs),
        (
            pending(1, "b", gpus=b_asks, submitted=NOW - 60),
            *(pending(10 + i, "a", gpus=g, submitted=NOW - 600) for i, g in enumerate(a_asks)),
        ),
        share_balance={("a", "h100"): -1e9},
    )
    result = plan(snapshot, Policy())
    admitted = {a.job_id for a in result.admissions}
    claimed = any(
        p.job_id == 1 and p.reason.code == ReasonCode.WAITING_FOR_PREEMPTION for p in result.pending
    )
    if 1 not in admitted and not claimed:
        assert not admitted, result.admissions


def test_a_team_in_debt_takes_a_fraction_of_a_gpu_on_a_node_in_use() -> None:
    """Team a (share 0) is deep in debt and shares a GPU of n1 with a half-GPU job; team b holds a
    GPU of n2 and waits with a gang for both nodes, beyond its share. A quarter of a GPU on n1
    costs no one anything now: it starts, borrowed."""
    half = RunningJob(**{**_init(running(10, "a", {"n1": 1})), "gpu_milli": 500})
    half = replace(half, devices=(("n1", 0),))
    quarter = PendingJob(**{**_init(pending(1, "a")), "gpu_milli": 250})
    snapshot = Snapshot(
        NOW,
        nodes(2, h100=2),
        (team("a", weight=0.0), team("b", guarantee=4)),
        (half, running(11, "b", {"n2": 1})),
        (quarter, pending(2, "b", workers=2, gpus=2)),
        share_balance={("a", "h100"): -1e9},
        shared_flavors=frozenset({"h100"}),
    )
    result = plan(snapshot, Policy())
    assert [(a.job_id, a.devices, a.borrowed) for a in result.admissions] == [
        (1, (("n1", 0),), True)
    ]


def _init(job: object) -> dict[str, object]:
    fields = type(job).__dataclass_fields__  # type: ignore[attr-defined]
    return {f: getattr(job, f) for f in fields if fields[f].init}
