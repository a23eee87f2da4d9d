"""The simulated cluster keeps its own bookkeeping in a workload's env beside the job's
variables: a job's variable of the same name (env names may be lower case) changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuqueue.cluster.base import Phase
from gpuqueue.cluster.simulated import SimulatedBackend
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle


def test_a_job_s_variables_named_like_the_simulation_s_own_keys_change_nothing(
    world: Any, submit: Any, cluster_file: Path, settings: Any
) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    backend = SimulatedBackend(
        cluster_file, startup_seconds=0, checkpoint_seconds=0, termination_seconds=60
    )
    sync_cluster(backend)  # the nodes
    job = submit(
        gpus_per_worker=8,
        env={
            "sim_terminating_until": "not a time",
            "sim_gpus_per_worker": "lots",
            "prior_progress": "9e9",
        },
        annotations={"gpuqueue.dev/sim-duration-seconds": "3600"},
    )
    run_cycle(backend=backend)
    job.refresh_from_db()
    (status,) = [s for s in backend.observe() if s.job_id == job.pk]
    assert status.phase in (Phase.STARTING, Phase.RUNNING)
    assert all(not node.draining for node in backend.list_nodes())
    backend.stop(job.pk, job.attempts)
    assert [node.draining for node in backend.list_nodes() if node.draining] == [
        {job.pk: {"nvidia.com/gpu": 8}}
    ]
