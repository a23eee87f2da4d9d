"""The cycle's kept objects frozen out of the collector (cycle/collector.py), and released."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from gpuqueue.cycle import collector


@pytest.fixture(autouse=True)
def _thawed(monkeypatch: Any) -> Iterator[SimpleNamespace]:
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(collector, "time", SimpleNamespace(monotonic=lambda: clock.now))
    monkeypatch.setattr(collector, "_frozen_at", [])
    gc.unfreeze()
    yield clock
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_a_small_queue_freezes_nothing() -> None:
    collector.freeze(collector.FREEZE_FROM - 1)
    assert gc.get_freeze_count() == 0


def test_a_large_queue_is_frozen_until_the_release_collects_what_became_garbage(
    _thawed: SimpleNamespace,
) -> None:
    node = Node()
    gone = weakref.ref(node)
    collector.freeze(collector.FREEZE_FROM)
    assert gc.get_freeze_count() > 0
    del node
    gc.collect()
    assert gone() is not None  # frozen: the collector skips it

    _thawed.now += collector.RELEASE_SECONDS - 1
    collector.freeze(collector.FREEZE_FROM)  # the next cycle: the first freeze's time counts
    collector.release_when_due()
    assert gc.get_freeze_count() > 0 and gone() is not None

    _thawed.now += 1
    collector.release_when_due()
    assert gc.get_freeze_count() == 0 and gone() is None
