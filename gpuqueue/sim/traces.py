"""Loaders for the trace formats in ../shared/traces, read as they are (no preprocessing step).

Every loader returns jobs sorted by submission time with ids 0..n-1 in that order, and virtual
time starting at 0 at the first submission, so that runs on different traces look alike.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

from gpuqueue.sim.cluster import Cluster, SimNode
from gpuqueue.sim.jobs import SimJob, gang_shape

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
OPENB_NODE_COLUMNS = ("sn", "gpu", "model")
OPENB_POD_COLUMNS = ("num_gpu", "gpu_milli", "creation_time", "deletion_time")


def _reader(f: TextIO, path: str | Path, what: str, columns: tuple[str, ...]) -> csv.DictReader:
    """A CSV reader that first checks the header names every column the loader reads."""
    reader = csv.DictReader(f)
    missing = [c for c in columns if c not in (reader.fieldnames or ())]
    if missing:
        raise ValueError(
            f"{path}: not {what}: no column {', '.join(missing)} (needs {', '.join(columns)})"
        )
    return reader


def load_philly(path: str | Path, node_size: int = 8, flavor: str = "gpu") -> list[SimJob]:
    """Philly jobs CSV (`timestamp,duration,num_gpus,gpu_time,cluster`); the VC is the team.

    Jobs larger than `node_size` become gangs (see `gang_shape`). Ties in submission time keep
    the file's order, so ids are stable across runs.
    """
    raw: list[tuple[float, int, float, int, str]] = []
    with open(path, newline="") as f:
        reader = _reader(f, path, "a Philly jobs CSV", PHILLY_COLUMNS)
        for row_no, row in enumerate(reader):
            if not row.get("timestamp"):
                continue  # the file ends with a blank line
            try:
                submitted = datetime.fromisoformat(row["timestamp"]).timestamp()
                duration, num_gpus = float(row["duration"]), int(row["num_gpus"])
            except ValueError as e:
                raise ValueError(f"{path}, line {reader.line_num}: {e}") from None
            raw.append((submitted, row_no, duration, num_gpus, row["cluster"]))
    raw.sort()
    start = raw[0][0] if raw else 0.0
    jobs = []
    for job_id, (submitted, _, duration, num_gpus, team) in enumerate(raw):
        workers, per_worker = gang_shape(num_gpus, node_size)
        jobs.append(
            SimJob(
                id=job_id,
                team=team,
                submitted_at=submitted - start,
                duration=duration,
                workers=workers,
                gpus_per_worker=per_worker,
                flavor=flavor,
                user=team,
            )
        )
    return jobs


def load_openb_nodes(path: str | Path, flavor_by_model: bool = False) -> Cluster:
    """openb node list (`sn,cpu_milli,memory_mib,gpu,model`); CPU-only nodes are left out.

    With `flavor_by_model` each GPU model is its own flavor; by default all GPUs are one flavor
    "gpu", because the openb pod lists we replay carry no `gpu_spec` (any model will do).
    """
    nodes = []
    with open(path, newline="") as f:
        reader = _reader(f, path, "an openb node list", OPENB_NODE_COLUMNS)
        for row in reader:
            try:
                gpus = int(row["gpu"])
            except ValueError as e:
                raise ValueError(f"{path}, line {reader.line_num}: {e}") from None
            if gpus <= 0:
                continue
            flavor = row["model"] if flavor_by_model else "gpu"
            nodes.append(SimNode(row["sn"], flavor, gpus))
    return Cluster(tuple(nodes))


@dataclass(frozen=True, slots=True)
class OpenbPods:
    jobs: list[SimJob]
    skipped_cpu_only: int
    skipped_fractional: int


def load_openb_pods(
    path: str | Path,
    fractional: str = "skip",
    flavor: str = "gpu",
    team: str = "openb",
) -> OpenbPods:
    """openb pod list; each GPU pod is a one-worker job (no pod there is larger than a node).

    1. CPU-only pods (`num_gpu == 0`) are left out: gpuqueue admits GPU work only.
    2. GPU-sharing pods (`gpu_milli < 1000`) cannot be expressed in whole GPUs: `fractional`
       "skip" leaves them out, "round-up" asks for one whole GPU each.
    3. The submission time is `creation_time`, the duration `deletion_time - creation_time`
       (at least one second); the FGD fill-up ignores both, as the FGD simulator does.
    4. `gpu_spec` picks the flavor (its first model) when present; the pod lists we use have none.
    """
    if fractional not in ("skip", "round-up"):
        raise ValueError(f"fractional must be 'skip' or 'round-up', not {fractional!r}")
    raw: list[tuple[float, int, float, int, str]] = []
    cpu_only = shared = 0
    with open(path, newline="") as f:
        reader = _reader(f, path, "an openb pod list", OPENB_POD_COLUMNS)
        for row_no, row in enumerate(reader):
            try:
                num_gpu = int(row["num_gpu"])
                milli = int(row["gpu_milli"])
                created = float(row["creation_time"] or 0)
                deleted = float(row["deletion_time"] or created + 1)
            except ValueError as e:
                raise ValueError(f"{path}, line {reader.line_num}: {e}") from None
            if num_gpu == 0:
                cpu_only += 1
                continue
            if num_gpu == 1 and milli < 1000:
                shared += 1
                if fractional == "skip":
                    continue
            spec = (row.get("gpu_spec") or "").split("|")[0]
            raw.append((created, row_no, max(deleted - created, 1.0), num_gpu, spec or flavor))
    raw.sort()
    start = raw[0][0] if raw else 0.0
    jobs = [
        SimJob(
            id=i,
            team=team,
            submitted_at=created - start,
            duration=duration,
            workers=1,
            gpus_per_worker=num_gpu,
            flavor=pod_flavor,
            user=team,
        )
        for i, (created, _, duration, num_gpu, pod_flavor) in enumerate(raw)
    ]
    return OpenbPods(jobs, cpu_only, shared)


def synthetic_jobs(
    count: int,
    seed: int,
    teams: tuple[str, ...] = ("a", "b", "c"),
    mean_interarrival: float = 60.0,
    node_size: int = 8,
) -> list[SimJob]:
    """A small Philly-shaped workload (mostly single GPUs, a few gangs) for tests and demos."""
    rng = random.Random(seed)
    sizes = [1] * 40 + [2] * 2 + [4] * 2 + [8] * 2 + [16]
    jobs = []
    t = 0.0
    for i in range(count):
        t += rng.expovariate(1.0 / mean_interarrival)
        workers, per_worker = gang_shape(rng.choice(sizes), node_size)
        team = rng.choice(teams)
        jobs.append(
            SimJob(
                id=i,
                team=team,
                submitted_at=round(t, 3),
                duration=round(rng.lognormvariate(7.0, 1.5), 3) + 1.0,
                workers=workers,
                gpus_per_worker=per_worker,
                user=team,
            )
        )
    return jobs


def subsample(jobs: list[SimJob], fraction: float, seed: int) -> list[SimJob]:
    """A seeded random subset of a trace, renumbered, for quick runs."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], not {fraction}")
    rng = random.Random(seed)
    kept = [j for j in jobs if rng.random() < fraction]
    return [
        SimJob(
            i,
            j.team,
            j.submitted_at,
            j.duration,
            j.workers,
            j.gpus_per_worker,
            j.flavor,
            j.priority,
            j.preemptible,
            j.user,
        )
        for i, j in enumerate(kept)
    ]
