"""First-come baselines with whole gangs: strict FIFO, and FIFO with best-effort backfill."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from gpuqueue.sim.ledger import Ledger
from gpuqueue.sim.placement import binpack
from gpuqueue.sim.policies.base import Decision, SchedulingPolicy
from gpuqueue.sim.queue import OrderedQueue
from gpuqueue.sim.run import JobRun


def fifo_key(run: JobRun) -> tuple[float, ...]:
    # 1. Submission time, then id: first come, first served; priorities and teams are ignored.
    return (run.job.submitted_at, float(run.job.id))


class StrictFifo(SchedulingPolicy):
    """One queue for the whole cluster; nothing passes the head, which waits until its whole
    gang fits. No quotas, no preemption."""

    name = "fifo"

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger)
        self.queue: OrderedQueue[JobRun] = OrderedQueue()

    def submitted(self, run: JobRun, now: float) -> None:
        self.queue.push(run.job.id, fifo_key(run), run)

    def started(self, run: JobRun, now: float) -> None:
        self.queue.remove(run.job.id)

    def stopped(self, run: JobRun, now: float) -> None:
        pass

    def cycle(self, now: float) -> Decision:
        free = list(self.ledger.free)
        decision = Decision()
        names = self.ledger.names
        for run in self.queue.values():
            job = run.job
            nodes = binpack(
                free, self.ledger.by_flavor.get(job.flavor, ()), job.workers, job.gpus_per_worker
            )
            if nodes is None:
                break
            for i, w in nodes:
                free[i] -= w * job.gpus_per_worker
            decision.placements.append((job.id, tuple(sorted((names[i], w) for i, w in nodes))))
        return decision


Shape = tuple[str, int, int]  # flavor, workers, GPUs per worker
Head = tuple[tuple[float, ...], int, JobRun, Iterator[JobRun]]


class FifoByShape(SchedulingPolicy):
    """First come, first served over one queue per job shape, merged by submission order.

    Once a job of some shape does not fit, no later job of the same shape fits in this cycle
    either (free capacity only shrinks), so a subclass may drop that queue: a cycle then costs
    O(admissions + shapes), not O(pending).
    """

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger)
        self.buckets: dict[tuple[object, ...], OrderedQueue[JobRun]] = {}

    def shape(self, run: JobRun) -> tuple[object, ...]:
        raise NotImplementedError

    def _bucket(self, run: JobRun) -> OrderedQueue[JobRun]:
        return self.buckets.setdefault(self.shape(run), OrderedQueue())

    def submitted(self, run: JobRun, now: float) -> None:
        self._bucket(run).push(run.job.id, fifo_key(run), run)

    def started(self, run: JobRun, now: float) -> None:
        self._bucket(run).remove(run.job.id)

    def stopped(self, run: JobRun, now: float) -> None:
        pass

    def heads(self) -> list[Head]:
        """A heap of each queue's first job, with the iterator over the rest of its queue."""
        heads: list[Head] = []
        for n, (_, bucket) in enumerate(sorted(self.buckets.items())):
            it = bucket.values()
            first = next(it, None)
            if first is not None:
                heads.append((fifo_key(first), n, first, it))
        heapq.heapify(heads)
        return heads


class FifoBackfill(FifoByShape):
    """FIFO order, but a job that does not fit is skipped and later ones that fit start
    (best effort: no reservation protects the head, so big gangs can starve). A shape that
    does not fit is dropped for the rest of the cycle."""

    name = "backfill"

    def shape(self, run: JobRun) -> Shape:
        job = run.job
        return (job.flavor, job.workers, job.gpus_per_worker)

    def cycle(self, now: float) -> Decision:
        free = list(self.ledger.free)
        free_by_flavor = dict(self.ledger.free_by_flavor)
        decision = Decision()
        names = self.ledger.names
        heads = self.heads()
        while heads:
            _, n, run, it = heapq.heappop(heads)
            job = run.job
            if free_by_flavor.get(job.flavor, 0) < job.gpus:
                continue
            nodes = binpack(
                free, self.ledger.by_flavor.get(job.flavor, ()), job.workers, job.gpus_per_worker
            )
            if nodes is None:
                continue  # drop the bucket: nothing of this shape fits any more this cycle
            for i, w in nodes:
                free[i] -= w * job.gpus_per_worker
            free_by_flavor[job.flavor] -= job.gpus
            decision.placements.append((job.id, tuple(sorted((names[i], w) for i, w in nodes))))
            nxt = next(it, None)
            if nxt is not None:
                heapq.heappush(heads, (fifo_key(nxt), n, nxt, it))
        return decision
