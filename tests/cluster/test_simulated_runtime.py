"""How long the simulated cluster runs a job: the simulator's annotation when it has one, else
the expected runtime its user declared, else a minute; never past its maximum runtime."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import SimulatedWorkload

SIM = "gpuqueue.dev/sim-duration-seconds"

CASES = [
    # (what the job declares, its annotations, seconds it runs, exit code)
    ("an expected runtime and no annotation", {"expected_runtime_seconds": 5400}, {}, 5400, 0),
    ("the annotation over the expected runtime", {"expected_runtime_seconds": 5400},
     {SIM: "30"}, 30, 0),
    ("neither: the default minute", {}, {}, 60, 0),
    ("the annotation alone", {}, {SIM: "90"}, 90, 0),
    ("an expected runtime past the maximum: stopped at the maximum",
     {"expected_runtime_seconds": 7200, "max_runtime_seconds": 3600}, {}, 3600, 124),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "declared", "annotations", "seconds", "exit_code"), CASES, ids=[c[0] for c in CASES]
)
def test_a_job_runs_for_what_it_declares(
    world: Any,
    submit: Any,
    backend: Any,
    name: str,
    declared: dict[str, int],
    annotations: dict[str, str],
    seconds: int,
    exit_code: int,
) -> None:
    sync_cluster(backend)
    job = submit(gpus_per_worker=1, annotations=annotations, **declared)
    assert run_cycle(backend=backend).admitted == [job.pk]
    workload = SimulatedWorkload.objects.get(job_id=job.pk)
    assert (workload.ends_at - workload.ready_at).total_seconds() == seconds
    assert workload.exit_code == exit_code
