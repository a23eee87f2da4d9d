"""EASY backfill (Lifka 1995; Mu'alem and Feitelson 2001), the baseline batch schedulers are
measured against: FIFO, where the first job that does not fit gets a reservation at the
earliest time it will (its "shadow" time), and later jobs may start now only when they cannot
delay it.

Two variants differ only in what they know of runtimes:

- `easy-oracle`: each job's true remaining runtime, from the trace. No real scheduler has it:
  it bounds what reservations and backfill can do.
- `easy-predicted`: predictions from the jobs finished so far (gpuqueue/sim/predicted.py), the
  same ones the engine gets; a running job that outlives its prediction gets a new one.

The reservation is per flavor and per node: at the shadow time the head's gang is placed on
the GPUs expected free then, and the GPUs it leaves over (`spare`) may hold backfill jobs that
end after the shadow time; a job expected to end before it may use any free GPU. No quotas,
no preemption, whole gangs.
"""

from __future__ import annotations

import heapq

from gpuqueue.sim.ledger import Ledger
from gpuqueue.sim.placement import binpack
from gpuqueue.sim.policies.base import Decision
from gpuqueue.sim.policies.fifo import FifoBackfill, fifo_key
from gpuqueue.sim.predicted import ReplayRuntimes
from gpuqueue.sim.run import JobRun

# Jobs looked at past the head per flavor and cycle, as Slurm's bf_max_job_test bounds it: at
# tens of thousands pending, trying each one every cycle would cost minutes per replay.
MAX_BACKFILL_TESTS = 500


class EasyBackfill(FifoBackfill):
    """FIFO backfill (its queues per shape) with a reservation for the head (see the module
    docstring)."""

    name = "easy-predicted"

    def __init__(self, ledger: Ledger, oracle: bool = False, q: float = 0.5) -> None:
        super().__init__(ledger)
        self.oracle = oracle
        self.runtimes = None if oracle else ReplayRuntimes(q)
        self.ends: dict[int, float] = {}  # running job id -> expected end
        self.runs: dict[int, JobRun] = {}

    def started(self, run: JobRun, now: float) -> None:
        super().started(run, now)
        if self.runtimes is None:
            self.ends[run.job.id] = now + run.remaining
        else:
            self.ends[run.job.id] = now + self.runtimes.started(run, now)
        self.runs[run.job.id] = run

    def stopped(self, run: JobRun, now: float) -> None:
        self.ends.pop(run.job.id, None)
        self.runs.pop(run.job.id, None)
        if self.runtimes is not None and run.finished_at is not None:
            self.runtimes.finished(run)

    def _runtime(self, run: JobRun) -> float:
        return run.remaining if self.runtimes is None else self.runtimes.remaining(run)

    def _shadow(self, run: JobRun, free: list[int], now: float) -> tuple[float, list[int]]:
        """When the gang of `run` should fit (from the expected ends of the running jobs of its
        flavor) and the GPUs per node left over then beside it (`spare`)."""
        job = run.job
        ledger = self.ledger
        g = job.gpus_per_worker
        nodes = ledger.by_flavor.get(job.flavor, [])
        at = list(free)
        fit = sum(at[i] // g for i in nodes)
        shadow = now
        events = sorted(
            (end, jid) for jid, end in self.ends.items() if self.runs[jid].job.flavor == job.flavor
        )
        for end, jid in events:
            if fit >= job.workers:
                break
            other = self.runs[jid]
            for name, workers in other.placement.items():
                i = ledger.index[name]
                before = at[i] // g
                at[i] += workers * other.job.gpus_per_worker
                fit += at[i] // g - before
            shadow = max(end, now)
        if fit < job.workers:
            return float("inf"), [0] * len(free)
        spare = at
        for i, w in binpack(at, nodes, job.workers, g) or []:
            spare[i] -= w * g
        return shadow, spare

    def cycle(self, now: float) -> Decision:
        if self.runtimes is not None:
            for run, runtime in self.runtimes.overdue(now, self.runs):
                assert run.started_at is not None
                self.ends[run.job.id] = run.started_at + runtime
        free = list(self.ledger.free)
        decision = Decision()
        names = self.ledger.names
        # flavor -> (shadow time, spare GPUs per node, backfill tests left)
        reserved: dict[str, tuple[float, list[int], list[int]]] = {}
        heads = self.heads()
        while heads:
            _, n, run, it = heapq.heappop(heads)
            job = run.job
            nodes = self.ledger.by_flavor.get(job.flavor, ())
            g = job.gpus_per_worker
            held = reserved.get(job.flavor)
            placed = None
            if held is None:
                placed = binpack(free, nodes, job.workers, g)
                if placed is None:
                    shadow, spare = self._shadow(run, free, now)
                    reserved[job.flavor] = (shadow, spare, [MAX_BACKFILL_TESTS])
                    continue  # the head keeps its place; its queue waits behind it
            else:
                shadow, spare, tests = held
                if tests[0] <= 0:
                    continue
                tests[0] -= 1
                if now + self._runtime(run) <= shadow:
                    placed = binpack(free, nodes, job.workers, g)
                else:
                    capped = [min(f, s) for f, s in zip(free, spare, strict=True)]
                    placed = binpack(capped, nodes, job.workers, g)
                    if placed is not None:
                        for i, w in placed:
                            spare[i] -= w * g
                if placed is None and sum(free[i] // g for i in nodes) < job.workers:
                    continue  # drop the bucket: nothing of this shape fits any more
            if placed is not None:
                for i, w in placed:
                    free[i] -= w * g
                decision.placements.append(
                    (job.id, tuple(sorted((names[i], w) for i, w in placed)))
                )
            nxt = next(it, None)
            if nxt is not None:
                heapq.heappush(heads, (fifo_key(nxt), n, nxt, it))
        return decision


class EasyOracle(EasyBackfill):
    """EASY backfill with the trace's true runtimes (see the module docstring)."""

    name = "easy-oracle"

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger, oracle=True)
