"""What a scheduling policy is to the simulator: it hears about jobs, and decides in cycles."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from gpuqueue.scheduler.model import Placement
from gpuqueue.sim.ledger import Ledger
from gpuqueue.sim.run import JobRun


@dataclass(slots=True)
class Decision:
    """One cycle's outcome. A placement names nodes and workers; for a gang policy it covers
    the whole gang, for pod-by-pod it may be some of the workers."""

    placements: list[tuple[int, Placement]] = field(default_factory=list)
    preemptions: list[tuple[int, str]] = field(default_factory=list)


class SchedulingPolicy(ABC):
    """A policy keeps its own view of the queue (whatever index makes its cycle cheap) and
    is told about every change the simulator makes.

    Callbacks come in this order for a job: submitted → placed* → started → [preempting →
    stopped → submitted …] → stopped.
    """

    name: ClassVar[str]
    gangs: ClassVar[bool] = True  # places whole gangs only
    uses_quotas: ClassVar[bool] = False  # honours team limits (the simulator checks it)
    # Needs cycles while nothing changes (starvation guards, minimum runtimes expiring).
    time_dependent: ClassVar[bool] = False

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    @abstractmethod
    def submitted(self, run: JobRun, now: float) -> None:
        """A job became pending: a new submission or a preempted job requeued."""

    def placed(self, run: JobRun, now: float) -> None:  # noqa: B027 (optional hook)
        """Some of a job's workers got GPUs but the gang is not whole yet."""

    @abstractmethod
    def started(self, run: JobRun, now: float) -> None:
        """The whole gang holds GPUs and runs."""

    def preempting(self, run: JobRun, now: float) -> None:  # noqa: B027 (optional hook)
        """A running job was asked to checkpoint; it keeps its GPUs until it stops."""

    @abstractmethod
    def stopped(self, run: JobRun, now: float) -> None:
        """A running job gave its GPUs back (finished, or preempted and about to be requeued)."""

    @abstractmethod
    def cycle(self, now: float) -> Decision:
        """Decide, without changing the ledger: the simulator checks and applies."""

    def wants_cycle(self) -> bool:
        """Whether the changes since the last cycle could change its decision."""
        return True

    def stats(self) -> dict[str, float]:
        """Numbers about the policy's own work (plan time), for the run's summary."""
        return {}
