"""The unit of a replay: a job as a trace describes it, before any scheduling happens."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SimJob:
    """One submission: who, when, how big, and how long it runs when left alone.

    `duration` is the job's work in seconds of uninterrupted running; a preempted job resumes
    from its last checkpoint and runs for what is left.
    """

    id: int
    team: str
    submitted_at: float
    duration: float
    workers: int
    gpus_per_worker: int
    flavor: str = "gpu"
    priority: int = 0
    preemptible: bool = True
    user: str = ""

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def gpu_seconds(self) -> float:
        return self.duration * self.gpus


def gang_shape(num_gpus: int, node_size: int) -> tuple[int, int]:
    """(workers, gpus_per_worker) for a job of `num_gpus` on nodes of `node_size` GPUs.

    A job that fits on a node is one worker. A larger job becomes a gang of the biggest workers
    that still divide it exactly and fit on a node, so that the GPU count is kept: 16 GPUs on
    8-GPU nodes are 2 × 8, and 12 GPUs are 2 × 6 rather than 2 × 8 (which would ask for 4 more).
    """
    if num_gpus <= 0:
        raise ValueError(f"a job needs at least one GPU, not {num_gpus}")
    if num_gpus <= node_size:
        return 1, num_gpus
    for per_worker in range(node_size, 0, -1):
        if num_gpus % per_worker == 0:
            return num_gpus // per_worker, per_worker
    raise AssertionError("unreachable: 1 divides every count")


def total_gpu_seconds(jobs: list[SimJob]) -> float:
    return math.fsum(j.gpu_seconds for j in jobs)
