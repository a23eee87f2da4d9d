"""Fragmentation gradient descent (Weng et al., ATC'23, "Beware of Fragmentation").

A node's fragmentation against one task shape is the part of its free GPU resource that the task
cannot use: all of it when the task does not fit on the node at all (too little CPU or memory
left, a model it does not accept, no GPU with room for it), else the free thousandths of the
GPUs that have less free than the task asks of one GPU (min(demand, 1 GPU)). Against a
workload, the expected fragmentation weighs each shape by how often it occurs. FGD places a task
where that expectation grows least. Everything is in thousandths of a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

FULL = 1000
# States a workload remembers before it starts afresh: a workload kept across plans (a trace's,
# Policy.workload) would otherwise grow with every node state it ever saw.
REMEMBERED = 1 << 20


@dataclass(frozen=True, slots=True)
class Shape:
    """One worker of a task: whole GPUs (`gpus`) or a fraction of one (`milli`), CPU and memory
    it asks, and the models it accepts (empty: any)."""

    gpus: int
    milli: int
    cpu: int
    memory: int
    models: tuple[str, ...] = ()


class Workload:
    """The target workload: shapes with their frequencies, and node fragmentation against it.

    Shapes are grouped by what they ask of GPUs; within a group, the mass that fits a node's CPU
    and memory is kept per (group, CPU left, memory left), and a node's expected fragmentation
    per state, because nodes of one kind and the same pods come back again and again.
    """

    __slots__ = ("_fits", "_frag", "cpu_per_gpu", "groups")

    def __init__(self, shapes: Iterable[tuple[Shape, float]]) -> None:
        weights: dict[Shape, float] = {}
        for shape, weight in shapes:
            weights[shape] = weights.get(shape, 0.0) + weight
        total = sum(weights.values())
        grouped: dict[tuple[int, int, tuple[str, ...]], list[tuple[int, int, float]]] = {}
        for shape in sorted(weights, key=_SHAPE_KEY):
            grouped.setdefault((shape.gpus, shape.milli, shape.models), []).append(
                (shape.cpu, shape.memory, weights[shape] / total if total else 0.0)
            )
        # (gpus, milli, models, total mass, [(cpu, memory, mass)] by cpu)
        self.groups = [
            (gpus, milli, models, sum(m for _, _, m in rows), rows)
            for (gpus, milli, models), rows in grouped.items()
        ]
        # Millicores the shapes ask per GPU they ask, weighed as the shapes are (0: none ask
        # GPUs). CPU-only tasks count: they take their CPU on the GPU nodes too, so a node
        # whose CPU merely matches its GPU work's leaves them none.
        gpu_mass = sum(m * (s.gpus * FULL + s.milli) for s, m in weights.items()) / FULL
        cpu_mass = sum(m * s.cpu for s, m in weights.items())
        self.cpu_per_gpu = cpu_mass / gpu_mass if gpu_mass else 0.0
        self._fits: dict[tuple[int, int, int], float] = {}
        self._frag: dict[tuple[int, tuple[int, ...], int, int, str | None], float] = {}

    def _mass_fitting(self, group: int, cpu_left: int, memory_left: int) -> float:
        key = (group, cpu_left, memory_left)
        mass = self._fits.get(key)
        if mass is None:
            mass = 0.0
            for cpu, memory, m in self.groups[group][4]:
                if cpu > cpu_left:
                    break  # rows are by CPU
                if memory <= memory_left:
                    mass += m
            self._fits[key] = mass
        return mass

    def fragmentation(
        self,
        free_gpus: int,
        used: Mapping[int, int],
        cpu_left: int,
        memory_left: int,
        model: str | None,
    ) -> float:
        """Expected fragmentation (thousandths) of a node with `free_gpus` whole free GPUs and
        `used` thousandths on its opened GPUs, `cpu_left` and `memory_left` unrequested."""
        partial = tuple(sorted(FULL - u for u in used.values() if u < FULL))
        key = (free_gpus, partial, cpu_left, memory_left, model)
        value = self._frag.get(key)
        if value is not None:
            return value
        free_total = free_gpus * FULL + sum(partial)
        value = 0.0
        if free_total > 0:
            for i, (gpus, milli, models, mass, _) in enumerate(self.groups):
                if models and model not in models:
                    value += mass * free_total
                    continue
                if milli:
                    fits_gpu = free_gpus >= 1 or (bool(partial) and partial[-1] >= milli)
                    unusable = sum(p for p in partial if p < milli)
                elif gpus:
                    fits_gpu = free_gpus >= gpus
                    unusable = free_total - free_gpus * FULL
                else:
                    fits_gpu, unusable = True, 0  # a CPU-only task strands no GPU it fits
                if not fits_gpu:
                    value += mass * free_total
                    continue
                fitting = self._mass_fitting(i, cpu_left, memory_left)
                value += fitting * unusable + (mass - fitting) * free_total
        if len(self._frag) >= REMEMBERED:
            self._frag.clear()
            self._fits.clear()
        self._frag[key] = value
        return value


def _SHAPE_KEY(shape: Shape) -> tuple[int, int, tuple[str, ...], int, int]:
    return (shape.gpus, shape.milli, shape.models, shape.cpu, shape.memory)
