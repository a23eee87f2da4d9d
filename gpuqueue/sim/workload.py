"""From command-line choices to the three inputs of a replay: jobs, cluster and teams."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gpuqueue.scheduler.model import Team
from gpuqueue.sim.cluster import (
    Cluster,
    nodes_for_load,
    offered_load,
    parse_cluster_spec,
    uniform_cluster,
)
from gpuqueue.sim.jobs import SimJob, total_gpu_seconds
from gpuqueue.sim.quotas import helios_quotas, proportional_quotas, quotas_from_yaml
from gpuqueue.sim.traces import load_openb_nodes, load_openb_pods, load_philly, subsample


@dataclass(frozen=True, slots=True)
class Workload:
    jobs: list[SimJob]
    cluster: Cluster
    teams: tuple[Team, ...]
    offered_load: float


def load_jobs(
    trace: str, fmt: str, gpus_per_node: int, sample: float | None, seed: int, fractional: str
) -> list[SimJob]:
    if fmt == "philly":
        jobs = load_philly(trace, node_size=gpus_per_node)
    elif fmt == "openb":
        jobs = load_openb_pods(trace, fractional=fractional).jobs
    else:
        raise ValueError(f"unknown trace format {fmt!r} (philly or openb)")
    return subsample(jobs, sample, seed) if sample else jobs


def build_cluster(
    jobs: list[SimJob],
    spec: str | None,
    nodes_file: str | None,
    load: float | None,
    gpus_per_node: int,
) -> Cluster:
    """1. An openb node list, when given; 2. an explicit spec ("47x8", "h100=8x8,l4=4x4");
    3. otherwise uniform nodes sized so that the trace is an offered load of `load` (1.0)."""
    if nodes_file:
        return load_openb_nodes(nodes_file)
    if spec:
        return parse_cluster_spec(spec)
    span = _span(jobs)
    if span <= 0:
        raise ValueError(
            "cannot size a cluster for an offered load: the trace's jobs were all submitted "
            "at one instant (or there are none); give --cluster NODESxGPUS"
        )
    if load is not None and load <= 0:
        raise ValueError(f"--load must be above 0, not {load}")
    nodes = nodes_for_load(total_gpu_seconds(jobs), span, gpus_per_node, load or 1.0)
    return uniform_cluster(nodes, gpus_per_node)


def build_teams(jobs: list[SimJob], cluster: Cluster, quotas: str) -> tuple[Team, ...]:
    """`proportional` (default: the guarantees add up to the cluster), `proportional:F` (they
    add up to the fraction F of it, the rest shared by weight alone), a YAML path, or
    `helios:PATH[:DAY]`."""
    if quotas == "proportional":
        return proportional_quotas(jobs, cluster)
    if quotas.startswith("proportional:"):
        text = quotas.removeprefix("proportional:")
        try:
            fraction = float(text)
        except ValueError:
            fraction = math.nan
        if not 0 <= fraction <= 1:
            raise ValueError(f"quotas {quotas!r}: the guaranteed fraction is from 0 to 1")
        return proportional_quotas(jobs, cluster, guarantee_fraction=fraction)
    if quotas.startswith("helios:"):
        path, _, day = quotas.removeprefix("helios:").partition(":")
        return helios_quotas(path, jobs, cluster, day or None)
    if Path(quotas).suffix in (".yaml", ".yml"):
        return quotas_from_yaml(quotas, jobs, cluster)
    raise ValueError(
        f"quotas {quotas!r}: proportional[:FRACTION], a .yaml file, or helios:PATH[:DAY]"
    )


def workload(jobs: list[SimJob], cluster: Cluster, quotas: str = "proportional") -> Workload:
    load = offered_load(total_gpu_seconds(jobs), _span(jobs), cluster.capacity())
    return Workload(jobs, cluster, build_teams(jobs, cluster, quotas), load)


def _span(jobs: list[SimJob]) -> float:
    if not jobs:
        return 0.0
    return max(j.submitted_at for j in jobs) - min(j.submitted_at for j in jobs)
