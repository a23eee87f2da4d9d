"""On a real control plane: a guarantee is reclaimed even when the borrower's only jobs are
bigger than the need."""

from __future__ import annotations

import base64
from typing import Any

from gpuqueue.cluster.manifests import token_secret_name, workload_name
from gpuqueue.core.reason_text import describe_reason
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, JobEvent
from tests.kube.conftest import Kube, acknowledge

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


def state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def test_a_1x8_job_of_a_team_under_its_guarantee_starts_by_reclaiming_a_borrowers_2x8_gang(
    kube: Kube, submit: Any, world: Any, settings: Any, monkeypatch: Any
) -> None:
    """team-b borrows the whole H100 pool in two 2 x 8 gangs (its share is 24 of 32); team-a,
    under its guarantee of 8, asks for 1 x 8. Taking either gang drops team-b to 16, below
    its share: the guarantee wins, one gang is preempted, and team-a's job starts on it."""
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    gangs = [
        submit(world.carol, team=world.team_b, workers=2, gpus_per_worker=8, annotations=LONG)
        for _ in range(2)
    ]
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: all(state(g) == JobState.RUNNING for g in gangs))

    guaranteed = submit(workers=1, gpus_per_worker=8, annotations=LONG)
    result = run_cycle(backend=kube.backend)
    assert len(result.preempted) == 1
    (victim,) = [g for g in gangs if state(g) == JobState.PREEMPTING]
    guaranteed.refresh_from_db()
    assert describe_reason(guaranteed.pending_reason).startswith(
        f"Freeing 16 h100 GPUs from team-b's job #{victim.pk}, which is saving a checkpoint until "
    )
    pods = kube.pods("team-b", selector=f"gpuqueue.dev/job-id={victim.pk}")
    assert len(pods) == 2 and all(
        "gpuqueue.dev/checkpoint-requested" in p["metadata"]["annotations"] for p in pods
    )

    # The workload's part (kwok runs no containers): it saves and acknowledges.
    secret = kube.core.read_namespaced_secret(token_secret_name(victim.pk, 1), "team-b")
    token = base64.b64decode(secret.data["token"]).decode()
    acknowledge(victim.pk, token, "s3://ckpt/gang/step-7")
    kube.sync_until(lambda: state(victim) == JobState.PENDING)
    name = workload_name(victim.pk, 1)
    kube.wait(lambda: not [j for j in kube.jobs("team-b") if j["metadata"]["name"] == name])

    def started() -> bool:
        run_cycle(backend=kube.backend)
        return state(guaranteed) == JobState.RUNNING

    kube.sync_until(started, timeout=60)
    assert (
        next(iter(guaranteed.placement))
        in victim.events.filter(to_state=JobState.PENDING).last().details["placement"]
    )
    # The other gang was left alone: one victim, no more.
    other = next(g for g in gangs if g.pk != victim.pk)
    assert state(other) == JobState.RUNNING
    moves = JobEvent.objects.filter(to_state=JobState.PREEMPTING).exclude(
        from_state=JobState.PREEMPTING
    )
    assert list(moves.values_list("job_id", flat=True)) == [victim.pk]
