"""A job's life inside one replay: what the simulator changes as it schedules."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuqueue.sim.jobs import SimJob


@dataclass(slots=True, eq=False)
class JobRun:
    job: SimJob
    remaining: float  # seconds of work left (the whole duration until a preemption saves some)
    enqueued_at: float  # when it last became pending (submission or requeue)
    placement: dict[str, int] = field(default_factory=dict)  # node -> workers it holds now
    placed_workers: int = 0
    started_at: float | None = None  # start of the current run, once the whole gang holds GPUs
    first_start: float | None = None
    finished_at: float | None = None
    held_since: float | None = None  # first worker placed while the gang is incomplete
    held_incomplete: bool = False  # ever held GPUs while its gang was incomplete
    preempting_since: float | None = None
    epoch: int = 0  # bumped on every stop, so that stale events are recognised
    preemptions: int = 0
    lost_gpu_seconds: float = 0.0
    waited: float = 0.0  # total seconds pending, requeues included
    # (node, GPUs, since) for each placement while it is held; kept only to record segments.
    fragments: list[tuple[str, int, float]] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.started_at is not None

    def placement_tuple(self) -> tuple[tuple[str, int], ...]:
        return tuple(sorted(self.placement.items()))
