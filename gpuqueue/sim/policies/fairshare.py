"""Per-team fair share without reservations or preemption: a baseline that is fair by
construction and wastes nothing on draining nodes.

Each cycle, per flavor:
1. the team furthest below its share goes first (GPUs held over its guarantee, the smallest
   ratio first; a team with no guarantee counts as owed half a GPU, so it is not shut out);
2. inside the team, its oldest job that fits now starts (jobs that do not fit are skipped);
3. the team's ratio is counted again, and 1-2 repeat until no team has a job that fits.
Nothing is ever preempted, so a team above its share keeps what it took until its jobs end.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from gpuqueue.scheduler.model import Team
from gpuqueue.sim.ledger import Ledger
from gpuqueue.sim.placement import binpack
from gpuqueue.sim.policies.base import Decision, SchedulingPolicy
from gpuqueue.sim.policies.fifo import fifo_key
from gpuqueue.sim.queue import OrderedQueue
from gpuqueue.sim.run import JobRun

Shape = tuple[int, int]  # workers, GPUs per worker


class TeamFairShare(SchedulingPolicy):
    name = "fairshare"

    def __init__(self, ledger: Ledger, teams: Sequence[Team]) -> None:
        super().__init__(ledger)
        self.guarantee = {(t.id, f): q.guarantee for t in teams for f, q in t.quotas.items()}
        self.used: dict[tuple[str, str], int] = {}
        # (team, flavor) -> shape -> that shape's jobs, oldest first.
        self.queues: dict[tuple[str, str], dict[Shape, OrderedQueue[JobRun]]] = {}

    def _queue(self, run: JobRun) -> OrderedQueue[JobRun]:
        job = run.job
        shapes = self.queues.setdefault((job.team, job.flavor), {})
        return shapes.setdefault((job.workers, job.gpus_per_worker), OrderedQueue())

    def submitted(self, run: JobRun, now: float) -> None:
        self._queue(run).push(run.job.id, fifo_key(run), run)

    def started(self, run: JobRun, now: float) -> None:
        self._queue(run).remove(run.job.id)
        key = (run.job.team, run.job.flavor)
        self.used[key] = self.used.get(key, 0) + run.job.gpus

    def stopped(self, run: JobRun, now: float) -> None:
        key = (run.job.team, run.job.flavor)
        self.used[key] -= run.job.gpus

    def _ratio(self, key: tuple[str, str], used: int) -> float:
        return used / max(self.guarantee.get(key, 0), 0.5)

    def cycle(self, now: float) -> Decision:
        free = list(self.ledger.free)
        free_by_flavor = dict(self.ledger.free_by_flavor)
        decision = Decision()
        names = self.ledger.names
        used = dict(self.used)
        # Per queue, its shapes' iterators (each yields that shape's jobs oldest first).
        heap: list[tuple[float, tuple[str, str]]] = []
        for key, shapes in sorted(self.queues.items()):
            if any(shapes.values()):
                heap.append((self._ratio(key, used.get(key, 0)), key))
        heapq.heapify(heap)
        taken: set[int] = set()
        dropped: set[tuple[str, int, int]] = set()  # flavor, shape: nothing of it fits now
        while heap:
            _, key = heapq.heappop(heap)
            team, flavor = key
            nodes = self.ledger.by_flavor.get(flavor, ())
            best: JobRun | None = None
            for (workers, g), queue in self.queues[key].items():
                if (flavor, workers, g) in dropped:
                    continue
                if free_by_flavor.get(flavor, 0) < workers * g or (
                    sum(free[i] // g for i in nodes) < workers
                ):
                    dropped.add((flavor, workers, g))
                    continue
                for run in queue.values():
                    if run.job.id not in taken:
                        if best is None or fifo_key(run) < fifo_key(best):
                            best = run
                        break
            if best is None:
                continue  # nothing of this team fits now: it is out for this cycle
            job = best.job
            placed = binpack(free, nodes, job.workers, job.gpus_per_worker)
            assert placed is not None  # its shape passed the count above
            for i, w in placed:
                free[i] -= w * job.gpus_per_worker
            free_by_flavor[flavor] -= job.gpus
            taken.add(job.id)
            decision.placements.append((job.id, tuple(sorted((names[i], w) for i, w in placed))))
            used[key] = used.get(key, 0) + job.gpus
            heapq.heappush(heap, (self._ratio(key, used[key]), key))
        return decision
