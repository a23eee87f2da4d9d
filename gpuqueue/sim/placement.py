"""Where the baseline policies put workers: the same bin-packing the engine uses by default,
so that the baselines differ from gpuqueue in their queueing rules, not in placement."""

from __future__ import annotations

from collections.abc import Sequence


def binpack(
    free: Sequence[int], candidates: Sequence[int], workers: int, gpus_per_worker: int
) -> list[tuple[int, int]] | None:
    """Nodes for a whole gang, or None when it does not fit as a whole.

    1. A gang that fits on one node goes to the fullest node it fits on (best fit).
    2. Otherwise it takes nodes from the fullest that can host a worker to the emptiest,
       as many workers as each can hold, which keeps big holes for big gangs.
    """
    need = workers * gpus_per_worker
    best = -1
    for i in candidates:
        f = free[i]
        if f >= need and (best < 0 or f < free[best]):
            best = i
    if best >= 0:
        return [(best, workers)]
    usable = [i for i in candidates if free[i] >= gpus_per_worker]
    if sum(free[i] // gpus_per_worker for i in usable) < workers:
        return None
    chosen = []
    left = workers
    for i in sorted(usable, key=lambda i: (free[i], i)):
        take = min(free[i] // gpus_per_worker, left)
        chosen.append((i, take))
        left -= take
        if left == 0:
            break
    return chosen


def best_fit_node(free: Sequence[int], candidates: Sequence[int], gpus: int) -> int | None:
    """The fullest node with room for one worker of `gpus` GPUs."""
    best = -1
    for i in candidates:
        f = free[i]
        if f >= gpus and (best < 0 or f < free[best]):
            best = i
    return None if best < 0 else best
