"""A pending queue that stays in order with cheap appends and removals."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from typing import Generic, TypeVar

V = TypeVar("V")
Key = tuple[float, ...]


class OrderedQueue(Generic[V]):
    """Items in key order, addressed by job id.

    A sorted list of (key, job id) gives the order and a dict gives the items. Arrivals come in
    submission order, so almost every push is an append; a requeued job that goes back to its
    old place is inserted by bisection (a replay requeues thousands of preempted jobs into
    queues of thousands, where re-sorting the queue each time cost seconds).
    """

    __slots__ = ("_items", "_order")

    def __init__(self) -> None:
        self._items: dict[int, tuple[Key, V]] = {}
        self._order: list[tuple[Key, int]] = []

    def push(self, job_id: int, key: Key, value: V) -> None:
        self.remove(job_id)
        self._items[job_id] = (key, value)
        entry = (key, job_id)
        order = self._order
        if not order or entry > order[-1]:
            order.append(entry)
        else:
            insort(order, entry)

    def remove(self, job_id: int) -> V | None:
        item = self._items.pop(job_id, None)
        if item is None:
            return None
        order = self._order
        del order[bisect_left(order, (item[0], job_id))]
        return item[1]

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def values(self) -> Iterator[V]:
        items = self._items
        return (items[job_id][1] for _, job_id in self._order)

    def items(self) -> Iterator[tuple[Key, V]]:
        items = self._items
        return (items[job_id] for _, job_id in self._order)

    def head_key(self) -> Key | None:
        return self._order[0][0] if self._order else None
