"""What a cycle knows for the jobs that the free-GPU buckets do not place (shared_gpus.py):
nodes by GPU model, how many pending jobs require each model, and the fragmentation workload.

Built from the snapshot once per plan; on a cluster whose nodes name no model and a policy that
is not fragmentation, it reads nothing more of the snapshot and changes nothing for whole-GPU
jobs.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuqueue.scheduler import reasons
from gpuqueue.scheduler.fragmentation import Shape, Workload
from gpuqueue.scheduler.ledger import UNLIMITED, FlavorLedger, Ledger, workers_in
from gpuqueue.scheduler.model import (
    PendingJob,
    Placement,
    PlacementStrategy,
    Reason,
    RunningJob,
    Snapshot,
)
from gpuqueue.scheduler.shared_gpus import FULL, Devices, most_room, place_workers

# Thousandths of a GPU of fragmentation growth that a millicore of CPU mismatch weighs as
# (`Special.place`): a worker that moves a node's CPU left 10 CPUs further from what its free
# GPUs need costs a tenth of a GPU. Fragmentation growth reads CPU only once a shape no longer
# fits; the mismatch sees it coming. On openb's pod lists the CPU-light fractions (810
# thousandths on 3 CPUs) otherwise fill the CPU-rich two-GPU nodes, whose CPU then idles, while
# CPU-heavy work strands the GPUs of the CPU-poor nodes that were left for last: 0.04-0.7 points
# more allocated at 100 % arrived on each list, seed 42 (docs/benchmarks.md); 1e-3 gained a third of
# that on gpushare60, 1e-1 lost it on gpushare80.
STRAY = 1e-2


class Special:
    __slots__ = (
        "_any_pending",
        "_never",
        "_nodes",
        "_scarcity",
        "_workloads",
        "ledger",
        "models",
        "required",
        "snapshot",
        "strategy",
        "workload",
    )

    def __init__(
        self,
        snapshot: Snapshot,
        ledger: Ledger,
        strategy: PlacementStrategy,
        workload: Workload | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.ledger = ledger
        self.strategy = strategy
        self.models = {n.name: n.model for n in snapshot.nodes if n.model is not None}
        # model -> pending jobs that require it (only where nodes name models).
        self.required: dict[str, int] = {}
        if self.models:
            for job in snapshot.pending:
                for model in job.gpu_models:
                    self.required[model] = self.required.get(model, 0) + 1
        self._any_pending: bool | None = None
        self._nodes: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}
        self._never: dict[tuple[object, ...], Reason | None] = {}
        self._scarcity: dict[str, dict[str, int]] = {}
        self._workloads: dict[str, Workload] = {}
        self.workload = workload

    @property
    def any_pending(self) -> bool:
        """Whether some pending job is placed here (a fraction fits where no GPU is free)."""
        if self._any_pending is None:
            self._any_pending = any(job.shared for job in self.snapshot.pending)
        return self._any_pending

    def scarcity(self, fl: FlavorLedger) -> dict[str, int]:
        """node -> pending jobs that require its model, for the flavor's nodes whose model some
        pending job requires: any-model work goes first where it takes the least of them."""
        found = self._scarcity.get(fl.name)
        if found is None:
            found = {}
            if self.required:
                for node in fl.free:
                    model = self.models.get(node)
                    if model is not None and model in self.required:
                        found[node] = self.required[model]
            self._scarcity[fl.name] = found
        return found

    def places(self, fl: FlavorLedger) -> bool:
        """Whether this flavor's whole-GPU jobs are placed here rather than by the buckets."""
        return self.strategy is PlacementStrategy.FRAGMENTATION or bool(self.scarcity(fl))

    def nodes(self, fl: FlavorLedger, models: tuple[str, ...]) -> tuple[str, ...]:
        """The flavor's schedulable nodes of `models` (any, when empty), by name."""
        key = (fl.name, models)
        found = self._nodes.get(key)
        if found is None:
            if models:
                found = tuple(n for n in fl.free if self.models.get(n) in models)
            else:
                found = tuple(fl.free)
            self._nodes[key] = found
        return found

    def _workload(self, flavor: str) -> Workload:
        """The shapes of the plan's jobs of a flavor, by workers (or Policy's, when given)."""
        workload = self.workload or self._workloads.get(flavor)
        if workload is None:
            shapes: list[tuple[Shape, float]] = []
            jobs: list[RunningJob | PendingJob] = [*self.snapshot.running, *self.snapshot.pending]
            for job in jobs:
                if job.flavor == flavor:
                    gpus = 0 if job.gpu_milli else job.gpus_per_worker
                    models = job.gpu_models if isinstance(job, PendingJob) else ()
                    shape = Shape(
                        gpus, job.gpu_milli, job.cpu_per_worker, job.memory_per_worker, models
                    )
                    shapes.append((shape, float(job.workers)))
            workload = self._workloads[flavor] = Workload(shapes)
        return workload

    def place(self, job: PendingJob, fl: FlavorLedger) -> tuple[Placement, Devices] | None:
        score = None
        if self.strategy is PlacementStrategy.FRAGMENTATION:
            workload = self._workload(fl.name)
            room = fl.room or {}
            models = self.models
            cpu, memory = job.cpu_per_worker, job.memory_per_worker
            frag = workload.fragmentation
            per_gpu = workload.cpu_per_gpu
            taken = job.gpu_milli or job.gpus_per_worker * FULL  # thousandths per worker

            def score(
                node: str,
                count: int,
                used: Mapping[int, int],
                count_after: int,
                used_after: Mapping[int, int],
                workers_after: int,
            ) -> float:
                left = room.get(node)
                c, m = (UNLIMITED, UNLIMITED) if left is None else (left[0], left[1])
                c -= (workers_after - 1) * cpu
                m -= (workers_after - 1) * memory
                model = models.get(node)
                before = frag(count, used, c, m, model)
                growth = frag(count_after, used_after, c - cpu, m - memory, model) - before
                if left is None or left[0] >= UNLIMITED // 2:
                    return growth  # the node does not limit CPU
                # How much further the CPU left strays from what the free GPUs need at the
                # workload's CPU per GPU (where it is short, those GPUs strand; where it is
                # long, the CPU): a worker asking less CPU per GPU than that goes where CPU is
                # short, one asking more where it is long.
                gpu_left = count_after * FULL + sum(FULL - u for u in used_after.values())
                stray = c - cpu - gpu_left * per_gpu / FULL
                return growth + STRAY * (abs(stray) - abs(stray + cpu - taken * per_gpu / FULL))

        shared = fl.shared or {}
        if fl.gpu_team is not None and job.gpu_milli:
            shared = _as_seen_by(job.team, shared, fl.gpu_team)
        return place_workers(
            self.nodes(fl, job.gpu_models),
            fl.free,
            shared,
            job.workers,
            job.gpus_per_worker,
            job.gpu_milli,
            self.strategy,
            fl.caps(job.cpu_per_worker, job.memory_per_worker),
            self.scarcity(fl),
            score,
        )

    def claim(self, job: PendingJob, fl: FlavorLedger) -> tuple[Placement, dict[str, int]] | None:
        """Where `job` would run once the GPUs coming back (`fl.incoming`: from its victims, or
        promised to it) are free: its workers per node and the incoming GPUs each node gives,
        nodes with most coming back first; None when they are not enough. A fraction counts
        only whole GPUs coming back (one holds FULL // milli workers); a whole-GPU worker also
        the node's free GPUs beside them."""
        incoming = fl.incoming
        if not incoming:
            return None
        milli, g = job.gpu_milli, job.gpus_per_worker
        per_gpu = FULL // milli if milli else 0
        cap = fl.caps(job.cpu_per_worker, job.memory_per_worker, True)
        left = job.workers
        placement: list[tuple[str, int]] = []
        taken: dict[str, int] = {}
        nodes = [n for n in self.nodes(fl, job.gpu_models) if incoming.get(n, 0) > 0]
        for node in sorted(nodes, key=lambda n: (-incoming[n], n)):
            back = incoming[node]
            free = max(fl.free.get(node, 0), 0)
            here = back * per_gpu if milli else (free + back) // g
            if cap is not None:
                here = min(here, cap(node))
            workers = min(here, left)
            if workers <= 0:
                continue
            placement.append((node, workers))
            taken[node] = -(-workers // per_gpu) if milli else min(back, workers * g)
            left -= workers
            if not left:
                return tuple(placement), taken
        return None

    def _per_gpu(self, job: PendingJob) -> int:
        """Workers of `job` one GPU holds (a whole worker: 1 per gpus_per_worker GPUs)."""
        return FULL // job.gpu_milli if job.gpu_milli else 1

    def never_fits(self, job: PendingJob, fl: FlavorLedger | None) -> Reason | None:
        """Step 1 for such a job: no state of the cluster admits it (the numbers say why),
        judged once per shape: it reads only the nodes."""
        key = (
            job.flavor,
            job.workers,
            job.gpus_per_worker,
            job.gpu_milli,
            job.gpu_models,
            job.cpu_per_worker,
            job.memory_per_worker,
        )
        if key not in self._never:  # its numbers are the shape's: the same for every such job
            self._never[key] = self._never_fits(job, fl)
        return self._never[key]

    def _never_fits(self, job: PendingJob, fl: FlavorLedger | None) -> Reason | None:
        if fl is None:
            return reasons.never_fits(job, 0, 0, 0)
        milli, g = job.gpu_milli, job.gpus_per_worker
        if milli and (milli >= FULL or milli < 0 or g != 1):
            return reasons.with_shared(reasons.never_fits(job, 0, 0, 0), job, 0)
        if milli and fl.shared is None:
            why = reasons.never_fits(job, fl.max_node, fl.total_capacity, 0)
            return reasons.with_shared(why, job, 0, shared=False)
        nodes = self.nodes(fl, job.gpu_models)
        largest = total = most = 0
        for node in nodes:
            gpus = fl.capacity[node]
            largest = max(largest, gpus)
            total += gpus
            per_node = gpus * self._per_gpu(job) if milli else gpus // max(g, 1)
            room = fl.allocatable.get(node) if fl.room is not None else None
            if room is not None and per_node > 0:
                per_node = min(
                    per_node, workers_in(room, job.cpu_per_worker, job.memory_per_worker)
                )
            most += per_node
        if job.workers <= 0 or g <= 0 or most < job.workers:
            return reasons.with_shared(reasons.never_fits(job, largest, total, most), job, 0)
        return None

    def room(self, job: PendingJob, fl: FlavorLedger) -> tuple[int, int, int]:
        """For a reason: workers that fit now, one by one (a gang needs them all at once), the
        free whole GPUs of its nodes, and the most thousandths free on one of their GPUs."""
        nodes = self.nodes(fl, job.gpu_models)
        shared = fl.shared or {}
        if fl.gpu_team is not None and job.gpu_milli:
            shared = _as_seen_by(job.team, shared, fl.gpu_team)
        cap = fl.caps(job.cpu_per_worker, job.memory_per_worker)
        fit = free = 0
        for node in nodes:
            count = max(fl.free.get(node, 0), 0)
            free += count
            if job.gpu_milli:
                here = count * (FULL // job.gpu_milli)
                here += sum((FULL - u) // job.gpu_milli for u in shared.get(node, {}).values())
            else:
                here = count // job.gpus_per_worker
            if cap is not None:
                here = min(here, cap(node))
            fit += here
        return fit, free, most_room(nodes, fl.free, shared)


def _as_seen_by(
    team: str, shared: Mapping[str, Mapping[int, int]], teams: Mapping[tuple[str, int], str]
) -> dict[str, dict[int, int]]:
    """The opened GPUs as `team` may use them: another team's are full (still opened, so
    that a GPU opened next takes another index)."""
    return {
        node: {
            index: on_gpu if teams.get((node, index), team) == team else FULL
            for index, on_gpu in gpus.items()
        }
        for node, gpus in shared.items()
    }
