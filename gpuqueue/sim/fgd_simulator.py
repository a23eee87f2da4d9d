"""FGD's own placement rule as its simulator runs it: the fill-up's reference (`fgd-sim`).

gpuqueue never places pods this way; the fill-up runs it to show that its procedure (arrivals,
drops, the allocation and fragmentation it reads) gives FGD's published figures, so that what
separates gpuqueue's `fgd` from them is placement, not measurement. As FGD's simulator
(hkust-adsl/kubernetes-scheduler-simulator, the FGD score plugin under kube-scheduler) does:

- every pod, CPU-only ones too, is placed by the same rule, one at a time in arrival order;
- a node fits when its CPU, memory, GPUs (and model) hold the pod;
- its score is int(100 × sigmoid(Δ / 1000)), Δ the drop of the node's fragmentation
  (`FgdMeasure`: typical pods by count, memory left out) the pod would cause; a fraction takes,
  of the GPUs with room, the first with the highest score, whole GPUs the first free ones;
- of the nodes with the highest score, the first in a seeded order of the nodes (FGD prefixes
  node names with a random permutation and takes the smallest name).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from gpuqueue.sim.fillup import (
    FGD_SIMULATOR,
    FULL,
    SAMPLED,
    FgdMeasure,
    FillUp,
    OpenbNode,
    Pod,
    Readings,
    arrive,
)

Choice = tuple[int, tuple[int, ...]]  # (score, GPU indices the pod takes)


class FgdSimulatorRule:
    """The nodes' state (CPU, memory, thousandths left per GPU) and FGD's choice for a pod."""

    def __init__(
        self, nodes: Sequence[OpenbNode], measure: FgdMeasure, order: Sequence[int]
    ) -> None:
        self.nodes = list(nodes)
        self.measure = measure
        # order[i]: node i's place in the seeded order; ties go to the smallest.
        self.order = list(order)
        self.cpu = [n.cpu for n in nodes]
        self.memory = [n.memory for n in nodes]
        self.left = [[FULL] * n.gpus for n in nodes]
        # Per node: pod -> its choice there (None: it does not fit), until the node changes.
        self._choices: list[dict[Pod, Choice | None]] = [{} for _ in nodes]
        self._frag: dict[tuple[tuple[int, ...], int, str], float] = {}

    def fragmentation(self, left: Sequence[int], cpu: int, model: str) -> float:
        key = (tuple(sorted(left)), cpu, model)
        value = self._frag.get(key)
        if value is None:
            value = self._frag[key] = self.measure.node(left, cpu, model)
        return value

    def choice(self, i: int, pod: Pod) -> Choice | None:
        """The pod's score on node i and the GPUs it would take there; None if it does not fit."""
        cpu, left, model = self.cpu[i], self.left[i], self.nodes[i].model
        if cpu < pod.cpu or self.memory[i] < pod.memory or (pod.models and model not in pod.models):
            return None
        before = self.fragmentation(left, cpu, model)

        def score(after: list[int]) -> int:
            drop = before - self.fragmentation(after, cpu - pod.cpu, model)
            return int(100.0 / (1.0 + math.exp(-drop / FULL)))

        if pod.milli:
            best: Choice | None = None
            for g, room in enumerate(left):
                if room >= pod.milli:
                    after = list(left)
                    after[g] -= pod.milli
                    s = score(after)
                    if best is None or s > best[0]:
                        best = (s, (g,))
            return best
        if pod.gpus:
            free = [g for g, room in enumerate(left) if room == FULL][: pod.gpus]
            if len(free) < pod.gpus:
                return None
            after = list(left)
            for g in free:
                after[g] = 0
            return (score(after), tuple(free))
        return (score(left), ())

    def place(self, pod: Pod) -> int | None:
        """Places the pod where FGD would; returns the node's index, None when none fits."""
        best: tuple[int, int, int, tuple[int, ...]] | None = None  # (-score, order, node, GPUs)
        for i, known in enumerate(self._choices):
            if pod in known:
                found = known[pod]
            else:
                found = known[pod] = self.choice(i, pod)
            if found is None:
                continue
            key = (-found[0], self.order[i], i, found[1])
            if best is None or key < best:
                best = key
        if best is None:
            return None
        _, _, i, gpus = best
        self.cpu[i] -= pod.cpu
        self.memory[i] -= pod.memory
        for g in gpus:
            self.left[i][g] -= pod.milli or FULL
        self._choices[i] = {}
        return i

    def total_fragmentation(self) -> float:
        return sum(
            self.fragmentation(left, cpu, n.model)
            for left, cpu, n in zip(self.left, self.cpu, self.nodes, strict=True)
        )


def fgd_simulator_fill_up(
    pods: Sequence[Pod], nodes: Sequence[OpenbNode], seed: int, tune: float = 1.3
) -> FillUp:
    """`fill_up`'s arrivals and readings with FGD's rule placing every pod, CPU-only ones in
    their place in the arrival order; the node order is drawn from the same generator after
    the arrivals."""
    started = time.perf_counter()
    rng, arrivals, steps = arrive(pods, nodes, seed, tune)
    order = list(range(len(nodes)))
    rng.shuffle(order)
    rule = FgdSimulatorRule(nodes, FgdMeasure(pods), order)
    readings = Readings(sum(n.gpus for n in nodes), steps)
    allocated = 0
    for step in range(steps + 1):
        for _, pod in arrivals[step]:
            if rule.place(pod) is not None:
                allocated += pod.gpu_milli
        readings.take(step, allocated, rule.total_fragmentation() if step in SAMPLED else None)
    return readings.result(FGD_SIMULATOR, seed, arrivals, started)
