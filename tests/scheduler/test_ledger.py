"""The ledger's shortcuts leave it as the plain operations would (Hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler.fairshare import capacity_by_flavor
from gpuqueue.scheduler.ledger import FlavorLedger, Ledger
from gpuqueue.scheduler.model import Placement, PlacementStrategy, Snapshot
from gpuqueue.scheduler.placement import fit_gang, fit_on
from tests.scheduler.test_properties import snapshots

NODES = [f"n{i}" for i in range(6)]


def _flavor(free: list[int]) -> FlavorLedger:
    fl = FlavorLedger("h100")
    for name, gpus in zip(NODES, free, strict=False):
        fl.free[name] = gpus
        fl.buckets.setdefault(gpus, {})[name] = None
        fl.total_free += max(gpus, 0)
    return fl


def _state(fl: FlavorLedger) -> tuple[dict[str, int], dict[int, list[str]], int]:
    """Free GPUs, the buckets with their nodes in order (placement takes them in that order),
    and the total."""
    buckets = {count: list(nodes) for count, nodes in fl.buckets.items() if nodes}
    return dict(fl.free), buckets, fl.total_free


@settings(max_examples=300, deadline=None)
@given(
    free=st.lists(st.integers(0, 8), min_size=1, max_size=len(NODES)),
    taken=st.lists(st.tuples(st.sampled_from(NODES), st.integers(0, 8)), max_size=12),
)
def test_taking_every_running_job_at_once_leaves_the_buckets_as_one_move_per_node(
    free: list[int], taken: list[tuple[str, int]]
) -> None:
    totals: dict[str, int] = {}
    for name, gpus in taken:
        if name in NODES[: len(free)]:
            totals[name] = totals.get(name, 0) + gpus
    one_by_one, at_once = _flavor(free), _flavor(free)
    for name in sorted(totals):  # in node order, whatever the order of the jobs
        one_by_one.move(name, one_by_one.free[name] - totals[name])
    at_once.take_all(totals)
    assert _state(at_once) == _state(one_by_one)


@settings(max_examples=200, deadline=None)
@given(snapshots())
def test_a_new_ledger_holds_each_flavor_s_capacity_free(snapshot: Snapshot) -> None:
    """The engine reads the capacity from the ledger before counting the running jobs."""
    ledger = Ledger(snapshot.nodes, {t.id: (t.id,) for t in snapshot.teams})
    assert {f: fl.total_free for f, fl in ledger.flavors.items()} == capacity_by_flavor(snapshot)


def _fit_on_a_ledger(
    avail: dict[str, int], workers: int, gpus_per_worker: int, strategy: PlacementStrategy
) -> Placement | None:
    """What `fit_on` did before it sorted the nodes itself: a ledger of `avail`, `fit_gang`."""
    fl = FlavorLedger("")
    for name in sorted(avail):
        fl.free[name] = avail[name]
        fl.buckets.setdefault(avail[name], {})[name] = None
        fl.total_free += max(avail[name], 0)
    return fit_gang(fl, workers, gpus_per_worker, strategy)


@settings(max_examples=500, deadline=None)
@given(
    avail=st.dictionaries(st.sampled_from(NODES), st.integers(-2, 16), max_size=len(NODES)),
    workers=st.integers(0, 6),
    gpus_per_worker=st.sampled_from([0, 1, 2, 4, 8]),
    strategy=st.sampled_from(list(PlacementStrategy)),
)
def test_a_reservation_is_placed_on_the_nodes_a_ledger_of_the_same_gpus_would_give(
    avail: dict[str, int], workers: int, gpus_per_worker: int, strategy: PlacementStrategy
) -> None:
    want = _fit_on_a_ledger(avail, workers, gpus_per_worker, strategy)
    assert fit_on(avail, workers, gpus_per_worker, strategy) == want
