"""A pending queue that stays in order with cheap appends and removals."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from operator import itemgetter
from typing import Generic, TypeVar

V = TypeVar("V")
Key = tuple[float, ...]


class OrderedQueue(Generic[V]):
    """Items in key order, addressed by job id.

    A sorted list of (key, job id, item) gives the order and a dict the keys by job id.
    Arrivals come in submission order, so almost every push is an append; a requeued job that
    goes back to its old place is inserted by bisection (a replay requeues thousands of
    preempted jobs into queues of thousands, where re-sorting the queue each time cost seconds).
    """

    __slots__ = ("_keys", "_order")

    def __init__(self) -> None:
        self._keys: dict[int, Key] = {}
        # (key, job id) is unique, so the item is never compared.
        self._order: list[tuple[Key, int, V]] = []

    def push(self, job_id: int, key: Key, value: V) -> None:
        self.remove(job_id)
        self._keys[job_id] = key
        entry = (key, job_id, value)
        order = self._order
        if not order or (key, job_id) > order[-1][:2]:
            order.append(entry)
        else:
            order.insert(bisect_left(order, (key, job_id)), entry)

    def remove(self, job_id: int) -> V | None:
        key = self._keys.pop(job_id, None)
        if key is None:
            return None
        order = self._order
        i = bisect_left(order, (key, job_id))  # (key, id) sorts just before (key, id, item)
        value = order[i][2]
        del order[i]
        return value

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def values(self) -> Iterator[V]:
        return map(itemgetter(2), self._order)

    def items(self) -> Iterator[tuple[Key, V]]:
        return ((key, value) for key, _, value in self._order)

    def head_key(self) -> Key | None:
        return self._order[0][0] if self._order else None
