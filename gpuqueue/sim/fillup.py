"""The FGD fill-up on openb: pods arrive and never leave; how much of the cluster gets allocated.

This follows the FGD simulator's procedure (../shared/traces/fgd-simulator-expected-results),
with the admission engine placing the GPU pods: every pod is kept, a GPU-sharing pod as a
fraction of one GPU (`share`), the CPU and memory of every pod and node count, and a pod's
`gpu_spec` is the GPU models it accepts. gpuqueue admits GPU work only: the CPU-only pods are
placed here, by the same fragmentation rule, and the engine sees them as others' pods on the node.
"""

from __future__ import annotations

import csv
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.fragmentation import FULL, Shape, Workload
from gpuqueue.scheduler.model import (
    Node,
    PendingJob,
    PlacementStrategy,
    Policy,
    Quota,
    RunningJob,
    Snapshot,
    Team,
)

FLAVOR = "gpu"
# The reference placement: FGD's own rule as its simulator runs it (fgd_simulator.py).
FGD_SIMULATOR = "fgd-sim"
MIB = 1 << 20
MODES = ("share", "skip", "round-up")


@dataclass(frozen=True, slots=True)
class Pod:
    """One openb pod: CPU millicores, memory bytes, whole GPUs or thousandths of one."""

    cpu: int
    memory: int
    gpus: int  # whole GPUs (0: a fraction, or none)
    milli: int  # thousandths of one GPU (0: whole GPUs, or none)
    models: tuple[str, ...] = ()

    @property
    def gpu_milli(self) -> int:
        """What it asks of the cluster's GPUs, in thousandths (FGD's measure of requests)."""
        return self.gpus * FULL + self.milli

    @property
    def shape(self) -> Shape:
        """Its shape as FGD's typical pods see it: CPU and GPUs, not memory."""
        return Shape(self.gpus, self.milli, self.cpu, 0, self.models)


@dataclass(frozen=True, slots=True)
class OpenbNode:
    name: str
    cpu: int
    memory: int
    gpus: int
    model: str


def load_nodes(path: str | Path) -> list[OpenbNode]:
    """openb node list (`sn,cpu_milli,memory_mib,gpu,model`); CPU-only nodes are left out."""
    nodes = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["gpu"])
            if gpus > 0:
                cpu, memory = int(row["cpu_milli"]), int(row["memory_mib"]) * MIB
                nodes.append(OpenbNode(row["sn"], cpu, memory, gpus, row["model"]))
    return nodes


def load_pods(path: str | Path, mode: str = "share") -> tuple[list[Pod], int]:
    """openb pod list, every pod kept except, with `skip`, the GPU-sharing ones (`gpu_milli` <
    1000 on one GPU); `round-up` asks one whole GPU for each of those. Returns the pods and how
    many sharing pods there were."""
    if mode not in MODES:
        raise ValueError(f"fractional must be one of {', '.join(MODES)}, not {mode!r}")
    pods = []
    sharing = 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            num_gpu, milli = int(row["num_gpu"]), int(row["gpu_milli"])
            spec = row.get("gpu_spec") or ""
            models = tuple(sorted(m for m in spec.split("|") if m))
            cpu, memory = int(row["cpu_milli"]), int(row["memory_mib"]) * MIB
            if num_gpu == 1 and 0 < milli < FULL:
                sharing += 1
                if mode == "skip":
                    continue
                if mode == "share":
                    pods.append(Pod(cpu, memory, 0, milli, models))
                    continue
            pods.append(Pod(cpu, memory, num_gpu, 0, models))
    return pods, sharing


@dataclass(frozen=True, slots=True)
class FillUp:
    strategy: str
    seed: int
    capacity: int  # GPUs
    # alloc[k]: GPU thousandths allocated, as % of capacity, once arrived requests reach k %.
    alloc: list[float]
    # At k = 80, 90, 100: fragmented GPU resource (FgdMeasure) as % of all GPUs, and as % of
    # the idle GPU resource.
    frag_amount: dict[int, float]
    frag_ratio: dict[int, float]
    pods: int
    wall_seconds: float


SAMPLED = (80, 90, 100)


class Readings:
    """What a fill-up reads after each step, whatever places the pods: the allocation, and at
    SAMPLED steps the fragmentation as FGD measures it."""

    def __init__(self, capacity: int, steps: int) -> None:
        self.capacity = capacity
        self.alloc = [0.0] * (steps + 1)
        self.frag_amount: dict[int, float] = {}
        self.frag_ratio: dict[int, float] = {}

    def take(self, step: int, allocated: int, frag: float | None = None) -> None:
        """`allocated` GPU thousandths after `step`; `frag`: the fragmentation then (SAMPLED)."""
        whole = self.capacity * FULL
        self.alloc[step] = 100.0 * allocated / whole
        if frag is not None:
            idle = whole - allocated
            self.frag_amount[step] = 100.0 * frag / whole
            self.frag_ratio[step] = 100.0 * frag / idle if idle > 0 else 0.0

    def result(
        self, strategy: str, seed: int, arrivals: list[list[tuple[int, Pod]]], started: float
    ) -> FillUp:
        arrived = sum(len(step) for step in arrivals)
        wall = time.perf_counter() - started
        return FillUp(
            strategy,
            seed,
            self.capacity,
            self.alloc,
            self.frag_amount,
            self.frag_ratio,
            arrived,
            wall,
        )


# --weights: the power of a pod's requests that weighs its shape (target_workload).
WEIGHTS = {"root": 0.5, "requests": 1.0, "pods": 0.0}


def target_workload(pods: Sequence[Pod], cpu_per_gpu: float, weights: str = "root") -> Workload:
    """The target workload of the fragmentation strategy: each pod's shape (CPU and GPUs, as
    FGD's typical pods, not memory) weighed by what it asks of the cluster, GPUs plus CPU in
    GPUs' worth (`cpu_per_gpu`: the cluster's CPU per GPU), to the power ½ (`root`), 1
    (`requests`) or 0 (`pods`, FGD's weights). Counting requests lets a few large pods outweigh
    the many small ones, counting pods the many small the few large; docs/benchmarks.md
    compares the three on FGD's pod lists."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, not {weights!r}")
    power = WEIGHTS[weights]
    return Workload((p.shape, (p.gpu_milli / FULL + p.cpu / cpu_per_gpu) ** power) for p in pods)


def fill_up(
    pods: Sequence[Pod],
    nodes: Sequence[OpenbNode],
    strategy: str,
    seed: int,
    tune: float = 1.3,
    weights: str = "root",
) -> FillUp:
    """1. Shuffle the pods (seeded), then sample more with replacement until the GPU requests
       reach `tune` × capacity in thousandths (FGD's `-tune 1.3`).
    2. Pods arrive in that order; the pods whose cumulative GPU request crosses k % of capacity
       arrive together at step k: one plan per step places them, one after the other in
       arrival order (as the FGD simulator does pod by pod). A pod that does not fit is
       dropped: with no departures it would never fit later.
    3. CPU-only pods of a step are placed after that plan, on the node whose fragmentation
       grows least, then with fewest GPUs free (bin-pack: the one with least CPU left that
       holds it; spread: the most).
    4. After each step: the allocation; at SAMPLED steps, the fragmentation as FGD measures it
       (`FgdMeasure`, against FGD's typical pods whatever the placement's `weights`).
    With `fgd-sim` (FGD_SIMULATOR), FGD's own rule places every pod instead, one at a time:
    the reference that shows this procedure gives FGD's published figures.
    """
    started = time.perf_counter()
    if strategy == FGD_SIMULATOR:
        from gpuqueue.sim.fgd_simulator import fgd_simulator_fill_up

        return fgd_simulator_fill_up(pods, nodes, seed, tune)
    _, arrivals, steps = arrive(pods, nodes, seed, tune)
    capacity = sum(n.gpus for n in nodes)
    workload = target_workload(pods, sum(n.cpu for n in nodes) / capacity, weights)
    policy = Policy(
        placement=PlacementStrategy(strategy),
        preemption=False,
        reclaim=False,
        time_based_share=False,
        workload=workload,
    )
    measure = FgdMeasure(pods)
    teams = (Team("openb", {FLAVOR: Quota(capacity, capacity)}),)
    by_name = {n.name: n for n in nodes}
    others: dict[str, list[int]] = {n.name: [0, 0, 0] for n in nodes}  # CPU-only pods' asks
    running: list[RunningJob] = []
    allocated = 0  # thousandths
    readings = Readings(capacity, steps)
    for step in range(steps + 1):
        gpu_pods = [(i, p) for i, p in arrivals[step] if p.gpu_milli]
        if gpu_pods:
            engine_nodes = tuple(
                Node(
                    n.name,
                    {FLAVOR: n.gpus},
                    cpu=n.cpu,
                    memory=n.memory,
                    cpu_used_externally=others[n.name][0],
                    memory_used_externally=others[n.name][1],
                    model=n.model,
                )
                for n in nodes
            )
            pending = tuple(
                PendingJob(
                    i,
                    "openb",
                    "openb",
                    FLAVOR,
                    1,
                    1 if p.milli else p.gpus,
                    0,
                    True,
                    float(step),
                    cpu_per_worker=p.cpu,
                    memory_per_worker=p.memory,
                    gpu_milli=p.milli,
                    gpu_models=p.models,
                )
                for i, p in gpu_pods
            )
            snapshot = Snapshot(
                float(step),
                engine_nodes,
                teams,
                tuple(running),
                pending,
                shared_flavors=frozenset({FLAVOR}),
            )
            jobs = {job.id: job for job in pending}
            for admission in plan(snapshot, policy, explain=False).admissions:
                job = jobs[admission.job_id]
                running.append(
                    RunningJob(
                        job.id,
                        "openb",
                        "openb",
                        FLAVOR,
                        job.gpus_per_worker,
                        admission.placement,
                        0,
                        True,
                        float(step),
                        cpu_per_worker=job.cpu_per_worker,
                        memory_per_worker=job.memory_per_worker,
                        gpu_milli=job.gpu_milli,
                        devices=admission.devices,
                    )
                )
                allocated += job.gpu_milli or job.gpus * FULL
        cpu_pods = [p for _, p in arrivals[step] if not p.gpu_milli]
        frag = None
        if cpu_pods or step in SAMPLED:
            state = _NodeState(nodes, running, others)
            for pod in cpu_pods:
                node = state.place_cpu_pod(pod, workload, strategy)
                if node is not None:
                    others[node][0] += pod.cpu
                    others[node][1] += pod.memory
                    others[node][2] += 1
            if step in SAMPLED:
                frag = sum(state.fgd_fragmentation(name, measure) for name in by_name)
        readings.take(step, allocated, frag)
    return readings.result(strategy, seed, arrivals, started)


def arrive(
    pods: Sequence[Pod], nodes: Sequence[OpenbNode], seed: int, tune: float
) -> tuple[random.Random, list[list[tuple[int, Pod]]], int]:
    """Steps 1 and 2 of `fill_up`: the seeded generator (drawn no further), the pods of each
    step (index in arrival order, pod), the last step."""
    rng = random.Random(seed)
    order = list(pods)
    rng.shuffle(order)
    capacity = sum(n.gpus for n in nodes)
    target = tune * capacity * FULL
    total = sum(p.gpu_milli for p in order)
    while total < target:
        extra = rng.choice(pods)
        order.append(extra)
        total += extra.gpu_milli
    steps = round(tune * 100)
    arrivals: list[list[tuple[int, Pod]]] = [[] for _ in range(steps + 1)]
    arrived = 0
    for i, pod in enumerate(order):
        arrived += pod.gpu_milli
        step = min(int(100 * arrived / (capacity * FULL) + 0.999999), steps)
        arrivals[step].append((i, pod))
    return rng, arrivals, steps


# FGD's typical pods (its experiments' `typicalPodsConfig`): CPU-only pods involved, the most
# frequent shapes that make 95 % of the pods, by pod count.
POPULARITY = 0.95


class FgdMeasure:
    """Fragmentation as the FGD simulator reports it (pkg/utils/frag.go, `NodeGpuShareFragAmount`
    summed over nodes, all but the `q3_satisfied` part): against its typical pods, a node's free
    GPU counts whole for every pod that cannot run there, and for a CPU-only pod (FGD counts
    those too); for one that can, the GPUs with less free than it asks of one GPU. Memory plays
    no part, as in FGD."""

    def __init__(self, pods: Sequence[Pod], popularity: float = POPULARITY) -> None:
        counts: dict[tuple[int, int, int, tuple[str, ...]], int] = {}
        for pod in pods:
            # (CPU, thousandths asked of each GPU, GPUs, models); a fraction is one GPU.
            per_gpu = pod.milli or (FULL if pod.gpus else 0)
            key = (pod.cpu, per_gpu, pod.gpus or (1 if pod.milli else 0), pod.models)
            counts[key] = counts.get(key, 0) + 1
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        kept: list[tuple[tuple[int, int, int, tuple[str, ...]], int]] = []
        covered = 0
        for shape, count in ranked:
            if covered >= popularity * len(pods):
                break
            kept.append((shape, count))
            covered += count
        self.typical = [(shape, count / covered) for shape, count in kept]

    def node(self, left: Sequence[int], cpu_left: int, model: str) -> float:
        """Fragmented thousandths of a node with `left` free thousandths per GPU."""
        total = sum(left)
        frag = 0.0
        for (cpu, per_gpu, gpus, models), share in self.typical:
            if per_gpu == 0 or (models and model not in models):
                frag += share * total
                continue
            if sum(1 for x in left if x >= per_gpu) >= gpus and cpu_left >= cpu:
                frag += share * sum(x for x in left if x < per_gpu)
            else:
                frag += share * total
        return frag


class _NodeState:
    """Per node: whole GPUs free, thousandths used per opened GPU, CPU and memory left."""

    def __init__(
        self,
        nodes: Sequence[OpenbNode],
        running: Sequence[RunningJob],
        others: dict[str, list[int]],
    ) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.free = {n.name: n.gpus for n in nodes}
        self.used: dict[str, dict[int, int]] = {n.name: {} for n in nodes}
        self.cpu = {n.name: n.cpu - others[n.name][0] for n in nodes}
        self.memory = {n.name: n.memory - others[n.name][1] for n in nodes}
        for job in running:
            for name, workers in job.placement:
                self.cpu[name] -= workers * job.cpu_per_worker
                self.memory[name] -= workers * job.memory_per_worker
                if not job.gpu_milli:
                    self.free[name] -= workers * job.gpus_per_worker
            for name, index in job.devices:
                gpus = self.used[name]
                gpus[index] = gpus.get(index, 0) + job.gpu_milli
        for name, gpus in self.used.items():
            self.free[name] -= len(gpus)

    def fragmentation(
        self, name: str, workload: Workload, cpu_taken: int = 0, memory_taken: int = 0
    ) -> float:
        return workload.fragmentation(
            self.free[name],
            self.used[name],
            self.cpu[name] - cpu_taken,
            self.memory[name] - memory_taken,
            self.nodes[name].model,
        )

    def fgd_fragmentation(self, name: str, measure: FgdMeasure) -> float:
        used = self.used[name]
        left = [FULL] * self.free[name] + [FULL - u for u in used.values()]
        return measure.node(left, self.cpu[name], self.nodes[name].model)

    def gpu_left(self, name: str) -> int:
        """Free GPU thousandths on a node."""
        return self.free[name] * FULL + sum(FULL - u for u in self.used[name].values())

    def place_cpu_pod(self, pod: Pod, workload: Workload, strategy: str) -> str | None:
        best: tuple[tuple[float, int], str] | None = None
        for name in self.nodes:
            if self.cpu[name] < pod.cpu or self.memory[name] < pod.memory:
                continue
            if strategy == PlacementStrategy.FRAGMENTATION.value:
                # Of the nodes where fragmentation grows least, the one with fewest GPUs free:
                # a CPU-only pod strands no GPU where none is left.
                before = self.fragmentation(name, workload)
                after = self.fragmentation(name, workload, pod.cpu, pod.memory)
                key = (after - before, self.gpu_left(name))
            elif strategy == PlacementStrategy.SPREAD.value:
                key = (-float(self.cpu[name]), 0)
            else:
                key = (float(self.cpu[name]), 0)
            if best is None or (key, name) < best:
                best = (key, name)
        if best is None:
            return None
        name = best[1]
        self.cpu[name] -= pod.cpu
        self.memory[name] -= pod.memory
        return name
