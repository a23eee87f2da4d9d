"""A pending queue that stays in order with O(1) appends and removals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

V = TypeVar("V")
Key = tuple[float, ...]


class OrderedQueue(Generic[V]):
    """Items in key order, addressed by job id.

    Arrivals come in submission order, so almost every push is an append to a dict (which keeps
    insertion order); only a requeued job that goes back to its old place costs a rebuild.
    """

    __slots__ = ("_items", "_last")

    def __init__(self) -> None:
        self._items: dict[int, tuple[Key, V]] = {}
        self._last: Key | None = None

    def push(self, job_id: int, key: Key, value: V) -> None:
        if self._last is None or key >= self._last or not self._items:
            self._items[job_id] = (key, value)
            self._last = key
            return
        self._items[job_id] = (key, value)
        self._items = dict(sorted(self._items.items(), key=lambda kv: kv[1][0]))

    def remove(self, job_id: int) -> V | None:
        item = self._items.pop(job_id, None)
        if not self._items:
            self._last = None
        return None if item is None else item[1]

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def values(self) -> Iterator[V]:
        return (v for _, v in self._items.values())

    def items(self) -> Iterator[tuple[Key, V]]:
        return iter(self._items.values())

    def head_key(self) -> Key | None:
        for key, _ in self._items.values():
            return key
        return None
