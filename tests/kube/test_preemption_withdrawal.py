"""On a real control plane: a preemption whose preemptor lands elsewhere is withdrawn before the
victim stops. The victim's pods lose the checkpoint request they were given, the job goes back
to RUNNING, and its gang keeps running on its node."""

from __future__ import annotations

from typing import Any

from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from gpuqueue.services.jobs.cancel import cancel_job
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
REQUEST = "gpuqueue.dev/checkpoint-requested"


def state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def requests(kube: Kube, job: Job) -> list[bool]:
    pods = kube.pods(job.team.namespace, selector=f"gpuqueue.dev/job-id={job.pk}")
    return [REQUEST in (p["metadata"].get("annotations") or {}) for p in pods]


def test_a_preemption_whose_preemptor_lands_elsewhere_is_withdrawn_from_the_victim_s_pods(
    kube: Kube, submit: Any, world: Any, settings: Any
) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    settings.GPUQUEUE_DEFAULT_CHECKPOINT_GRACE_SECONDS = 600  # the victim saves for long
    borrowed = [
        submit(
            world.carol,
            team=world.team_b,
            workers=1,
            gpus_per_worker=8,
            annotations=LONG,
            checkpoint_grace_seconds=600,
        )
        for _ in range(4)
    ]
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: all(state(j) == JobState.RUNNING for j in borrowed))
    guaranteed = submit(workers=1, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    (victim,) = [j for j in borrowed if state(j) == JobState.PREEMPTING]
    kube.wait(lambda: requests(kube, victim) == [True])

    # Another borrowed gang ends meanwhile: the guaranteed job takes its node instead.
    other = next(j for j in borrowed if j.pk != victim.pk)
    cancel_job(world.carol, other)

    def landed() -> bool:
        run_cycle(backend=kube.backend)
        return state(guaranteed) in (JobState.ADMITTED, JobState.RUNNING)

    kube.sync_until(landed, timeout=60)
    run_cycle(backend=kube.backend)
    assert state(victim) == JobState.RUNNING
    assert "preemption withdrawn" in victim.events.order_by("pk").last().reason
    kube.wait(lambda: requests(kube, victim) == [False])  # the workload is told to go on
    kube.sync_until(lambda: state(guaranteed) == JobState.RUNNING)
    assert state(victim) == JobState.RUNNING
