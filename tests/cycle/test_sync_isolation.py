"""One job whose sync step raises is failed with the error; the others move on as usual."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.core.states import JobState
from gpuqueue.cycle import cluster_sync
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle


def test_a_job_whose_sync_step_raises_fails_alone_and_the_pass_goes_on(
    world: Any, submit: Any, backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync_cluster(backend)
    # Workloads that end at once: the pass follows each (a gang that merely started moves in
    # one statement with the others, and its step is not its own).
    ends = {"annotations": {"gpuqueue.dev/sim-duration-seconds": "0"}}
    bad = submit(workers=1, gpus_per_worker=8, **ends)
    good = submit(workers=1, gpus_per_worker=8, **ends)
    run_cycle(backend=backend)
    real = cluster_sync._follow

    def follow(job: Any, status: Any, now: Any) -> Any:
        if job.pk == bad.pk:
            raise OverflowError("date value out of range")
        return real(job, status, now)

    monkeypatch.setattr(cluster_sync, "_follow", follow)
    sync_cluster(backend)
    bad.refresh_from_db()
    good.refresh_from_db()
    assert bad.state == JobState.FAILED
    assert "OverflowError: date value out of range" in bad.message
    assert good.state == JobState.SUCCEEDED
    assert bad.pk not in {s.job_id for s in backend.observe()}  # its workload was stopped
