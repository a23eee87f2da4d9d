"""On a real control plane: a preemption whose victim's pods take their time to terminate takes
exactly one victim. kwok removes a deleted pod at once; a finalizer keeps the victim's pods
terminating, as a real kubelet does through their grace."""

from __future__ import annotations

import base64
from typing import Any

from gpuqueue.cluster.manifests import token_secret_name
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, JobEvent, Node
from tests.kube.conftest import Kube, acknowledge

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
HOLD = "gpuqueue.test/terminating"


def state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def preempted() -> list[int]:
    moves = JobEvent.objects.filter(to_state=JobState.PREEMPTING).exclude(
        from_state=JobState.PREEMPTING
    )
    return list(moves.values_list("job_id", flat=True))


def test_a_preemption_whose_victim_s_pods_keep_terminating_takes_exactly_one_victim(
    kube: Kube, submit: Any, world: Any, settings: Any, monkeypatch: Any
) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    borrowed = [
        submit(world.carol, team=world.team_b, workers=1, gpus_per_worker=8, annotations=LONG)
        for _ in range(4)
    ]
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: all(state(j) == JobState.RUNNING for j in borrowed))

    guaranteed = submit(workers=1, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    (victim,) = [j for j in borrowed if state(j) == JobState.PREEMPTING]
    node = next(iter(victim.placement))
    selector = f"gpuqueue.dev/job-id={victim.pk}"
    for pod in kube.pods("team-b", selector=selector):
        kube.core.patch_namespaced_pod(
            pod["metadata"]["name"], "team-b", {"metadata": {"finalizers": [HOLD]}}
        )

    # It saves and acknowledges; gpuqueue requeues it and deletes its workload, whose pod
    # stays terminating.
    secret = kube.core.read_namespaced_secret(token_secret_name(victim.pk, 1), "team-b")
    token = base64.b64decode(secret.data["token"]).decode()
    acknowledge(victim.pk, token, "s3://ckpt/victim/step-1")
    kube.sync_until(lambda: state(victim) == JobState.PENDING)
    kube.sync_until(
        lambda: Node.objects.get(name=node).draining == {str(victim.pk): {"nvidia.com/gpu": 8}}
    )
    assert Node.objects.get(name=node).used_externally == {}

    try:
        # However many passes run meanwhile, team-a's job waits for that node and nothing
        # else is preempted.
        for _ in range(6):
            run_cycle(backend=kube.backend)
            kube.sync_until(lambda: True)
            guaranteed.refresh_from_db()
            assert guaranteed.state == JobState.PENDING
            assert guaranteed.pending_reason["code"] == "waiting_for_preemption"
            assert guaranteed.pending_reason["job_ids"] == [victim.pk]
            assert preempted() == [victim.pk]
    finally:
        # The pod goes (also when the test failed: the next test needs an empty cluster).
        for pod in kube.pods("team-b", selector=selector):
            kube.core.patch_namespaced_pod(
                pod["metadata"]["name"], "team-b", {"metadata": {"finalizers": None}}
            )
    kube.wait(lambda: not kube.pods("team-b", selector=selector))

    # Team-a's job starts where it was.

    def started() -> bool:
        run_cycle(backend=kube.backend)
        return state(guaranteed) in (JobState.ADMITTED, JobState.RUNNING)

    kube.sync_until(started, timeout=60)
    assert guaranteed.placement == {node: 1}
    assert preempted() == [victim.pk]
