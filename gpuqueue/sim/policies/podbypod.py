"""The default-Kubernetes failure mode: every worker is a pod placed on its own, first come
first served, with no idea that it belongs to a gang.

A gang's first pods take GPUs as soon as they fit and hold them, idle, until the last pod
lands; the simulator counts those GPU-hours. Gangs can even deadlock each other, each holding
part of what the other needs; the replay then stops and reports the jobs that never ran.
"""

from __future__ import annotations

import heapq

from gpuqueue.sim.placement import best_fit_node
from gpuqueue.sim.policies.base import Decision
from gpuqueue.sim.policies.fifo import FifoByShape, fifo_key
from gpuqueue.sim.run import JobRun

PodShape = tuple[str, int]  # flavor, GPUs per pod


class PodByPod(FifoByShape):
    """Pods in submission order; a pod that does not fit is skipped (kube-scheduler moves it
    to its unschedulable queue and goes on). Pods go to the fullest node with room, like the
    other policies, so that the difference measured is the missing gang rule alone."""

    name = "pod-by-pod"
    gangs = False

    def shape(self, run: JobRun) -> PodShape:
        return (run.job.flavor, run.job.gpus_per_worker)

    def cycle(self, now: float) -> Decision:
        free = list(self.ledger.free)
        decision = Decision()
        names = self.ledger.names
        heads = self.heads()
        while heads:
            _, n, run, it = heapq.heappop(heads)
            job = run.job
            candidates = self.ledger.by_flavor.get(job.flavor, ())
            placed: dict[int, int] = {}
            blocked = False
            for _ in range(job.workers - run.placed_workers):
                i = best_fit_node(free, candidates, job.gpus_per_worker)
                if i is None:
                    blocked = True
                    break
                free[i] -= job.gpus_per_worker
                placed[i] = placed.get(i, 0) + 1
            if placed:
                decision.placements.append(
                    (job.id, tuple(sorted((names[i], w) for i, w in placed.items())))
                )
            if blocked:
                continue  # later pods of this size cannot fit either: drop the bucket
            nxt = next(it, None)
            if nxt is not None:
                heapq.heappush(heads, (fifo_key(nxt), n, nxt, it))
        return decision
