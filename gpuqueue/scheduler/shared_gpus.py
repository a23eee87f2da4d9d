"""Shared GPUs and GPU models: placement one worker at a time, GPU by GPU.

A flavor whose GPUs may be shared (`Snapshot.shared_flavors`) keeps, per node, the thousandths
used on each GPU that fractional work opened (`FlavorLedger.shared`: node -> GPU index ->
thousandths). A GPU nobody opened stays whole, in the flavor's free count: whole-GPU work reads
only that count, so it never lands on a partly used GPU and costs no more.

This placement serves the jobs the free-GPU buckets cannot: a fractional job, a job that names
GPU models (`PendingJob.gpu_models`), a job on a flavor where pending jobs require some models
(the scarce-model tie-break) and every job under the fragmentation strategy. It walks the
flavor's nodes for each worker, on a scratch copy, so that a gang is placed whole or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gpuqueue.scheduler.model import Placement, PlacementStrategy

Devices = tuple[tuple[str, int], ...]  # (node, GPU index on that node) per worker, sorted
FULL = 1000  # thousandths of a GPU
_NONE: Mapping[int, int] = {}  # a node no fraction uses
# How much worse a node gets for the workload (fragmentation.py), smaller is better, from
# (node, free whole GPUs and thousandths used per opened GPU before, the same after, the job's
# workers on the node after).
Score = Callable[[str, int, Mapping[int, int], int, Mapping[int, int], int], float]


def ceil_gpus(milli: int) -> int:
    """Whole GPUs that `milli` thousandths need: exact against any whole bound (a + m/1000 <= b
    with a, b integers holds exactly when a + ceil(m/1000) <= b)."""
    return -(-milli // FULL)


def open_index(used: Mapping[int, int]) -> int:
    """The GPU index a fractional worker opens on a node: the lowest no fraction uses."""
    i = 0
    while i in used:
        i += 1
    return i


def place_workers(
    nodes: Sequence[str],
    free: Mapping[str, int],
    shared: Mapping[str, Mapping[int, int]],
    workers: int,
    gpus_per_worker: int,
    milli: int,
    strategy: PlacementStrategy,
    cap: Callable[[str], int] | None = None,
    scarcity: Mapping[str, int] | None = None,
    score: Score | None = None,
) -> tuple[Placement, Devices] | None:
    """Nodes (and GPUs, for a fractional job) for all `workers`, or None.

    0. With bin-pack, a whole-GPU gang goes to the fullest single node that holds it all.
    1. Each worker in turn takes the best candidate among `nodes` (those whose model the job
       accepts), on the state left by the workers before it: a fractional worker a partly
       used GPU with room or a fully free GPU, a whole worker `gpus_per_worker` free GPUs.
    2. Best is, with bin-pack, the partly used GPU with least room left, else the fullest
       node; with spread, the emptiest node, else the GPU with most room; with fragmentation,
       the smallest `score` (the growth of fragmentation, plus how much further the worker
       moves the node's CPU left from what its free GPUs need), then the node with
       most whole GPUs free (on openb's GPU-sharing pod lists it allocates up to a point more
       than the fullest: a fraction that changes fragmentation no more on either keeps the
       partly used nodes' GPUs for the fractions that fit them only). Ties go to the node
       whose model fewer pending jobs require (`scarcity`), then to the name and the GPU
       index: the same state, the same choice.
    3. A node holds no more workers than its room besides GPUs (`cap`).
    """
    if workers <= 0:
        return None
    spread = strategy is PlacementStrategy.SPREAD
    scarce = scarcity or {}
    if not milli and workers > 1 and score is None and not spread:
        # Bin-pack's first rule (placement._binpack): the fullest single node that holds the
        # whole gang, with no traffic between nodes.
        need = workers * gpus_per_worker
        whole: tuple[int, int, str] | None = None
        for node in nodes:
            count = free.get(node, 0)
            if count >= need and (cap is None or cap(node) >= workers):
                here_key = (count, scarce.get(node, 0), node)
                if whole is None or here_key < whole:
                    whole = here_key
        if whole is not None:
            return ((whole[2], workers),), ()
    free_now = {node: free.get(node, 0) for node in nodes}
    used_now: dict[str, dict[int, int]] = {}
    taken: dict[str, int] = {}
    devices: list[tuple[str, int]] = []
    for _ in range(workers):
        best: tuple[tuple[float, ...], str, int] | None = None
        for node in nodes:
            count = free_now[node]
            used: Mapping[int, int] | None = used_now.get(node)
            if used is None:
                used = shared.get(node, _NONE)
            # GPUs first: on a busy cluster most nodes have none for the worker, and that is
            # cheaper to tell than their room.
            if milli:
                if count < 1 and all(on_gpu + milli > FULL for on_gpu in used.values()):
                    continue
            elif count < gpus_per_worker:
                continue
            here = taken.get(node, 0)
            if cap is not None and cap(node) <= here:
                continue
            rank = scarce.get(node, 0)
            if milli:
                for index, on_gpu in used.items():
                    if on_gpu + milli > FULL:
                        continue
                    if score is not None:
                        after = dict(used)
                        after[index] = on_gpu + milli
                        change = score(node, count, used, count, after, here + 1)
                        key: tuple[float, ...] = (change, rank, -count)
                    elif spread:
                        key = (1.0, on_gpu, rank)
                    else:
                        key = (0.0, -on_gpu, rank)
                    if best is None or (key, node, index) < (best[0], best[1], best[2]):
                        best = (key, node, index)
                if count >= 1:
                    index = open_index(used)
                    if score is not None:
                        after = dict(used)
                        after[index] = milli
                        change = score(node, count, used, count - 1, after, here + 1)
                        key = (change, rank, -count)
                    elif spread:
                        key = (0.0, -count, rank)
                    else:
                        key = (1.0, count, rank)
                    if best is None or (key, node, index) < (best[0], best[1], best[2]):
                        best = (key, node, index)
            elif count >= gpus_per_worker:
                if score is not None:
                    after_count = count - gpus_per_worker
                    key = (score(node, count, used, after_count, used, here + 1), rank, -count)
                elif spread:
                    key = (-count, rank)
                else:
                    key = (count, rank)
                if best is None or (key, node) < (best[0], best[1]):
                    best = (key, node, -1)
        if best is None:
            return None
        _, node, index = best
        taken[node] = taken.get(node, 0) + 1
        if milli:
            mine = used_now.get(node)
            if mine is None:
                mine = used_now[node] = dict(shared.get(node, _NONE))
            if index not in mine:
                free_now[node] -= 1
            mine[index] = mine.get(index, 0) + milli
            devices.append((node, index))
        else:
            free_now[node] -= gpus_per_worker
    return tuple(sorted(taken.items())), tuple(sorted(devices))


def most_room(
    nodes: Sequence[str], free: Mapping[str, int], shared: Mapping[str, Mapping[int, int]]
) -> int:
    """The most thousandths free on one GPU of `nodes` (a reason's number)."""
    most = 0
    for node in nodes:
        if free.get(node, 0) >= 1:
            return FULL
        for on_gpu in shared.get(node, {}).values():
            most = max(most, FULL - on_gpu)
    return most
