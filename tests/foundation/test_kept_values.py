"""A cache's bulk reads and writes (`Kept.get_many`, `put_many`) answer as one `get` and `put`
per key would, under the same rule: the version read under, the age, the off switch."""

from __future__ import annotations

from typing import Any

from django.test import override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuqueue.core import caches

KEYS = st.integers(0, 20)
VERSIONS = st.sampled_from(["a", "b", None])


@settings(max_examples=200)
@given(
    kept=st.dictionaries(KEYS, st.tuples(VERSIONS, st.integers())),
    asked=st.dictionaries(KEYS, VERSIONS),
)
def test_bulk_reads_and_writes_answer_as_one_at_a_time(
    kept: dict[int, Any], asked: dict[int, Any]
) -> None:
    one, many = caches.Kept[int, int](max_entries=None), caches.Kept[int, int](max_entries=None)
    for key, (version, value) in kept.items():
        one.put(key, version, value)
    many.put_many(kept)
    assert many.get_many(asked) == {key: one.get(key, version) for key, version in asked.items()}


def test_nothing_is_kept_or_found_with_the_caches_off(monkeypatch: Any) -> None:
    kept = caches.Kept[int, int](max_entries=None)
    kept.put_many({1: ("v", 10)})
    assert kept.get_many({1: "v"}) == {1: 10}
    with override_settings(GPUQUEUE_CACHES=False):
        assert kept.get_many({1: "v"}) == {1: None}
        kept.put_many({2: ("v", 20)})
    assert kept.get_many({2: "v"}) == {2: None}
    monkeypatch.setattr(caches.time, "monotonic", lambda: 1e12)  # far past MAX_AGE_SECONDS
    assert kept.get_many({1: "v"}) == {1: None} and kept.get(1, "v") is None
