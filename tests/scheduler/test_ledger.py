"""The ledger's shortcuts leave it as the plain operations would (Hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler.ledger import FlavorLedger

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
    for name, gpus in totals.items():
        one_by_one.move(name, one_by_one.free[name] - gpus)
    at_once.take_all(totals)
    assert _state(at_once) == _state(one_by_one)
