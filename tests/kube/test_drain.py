"""On a real control plane: `kubectl drain` of a node under a gang (cordon, then the eviction
API) is a preemption: the gang is asked to checkpoint, requeued whole, and resumes elsewhere from
the newest checkpoint it registered."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.manifests import (
    CHECKPOINT_ANNOTATION,
    ClusterOptions,
    token_secret_name,
    workload_name,
)
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, Node
from tests.kube.conftest import Kube, acknowledge

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


def state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def gang_pods(kube: Kube, job: Job) -> list[dict[str, Any]]:
    return kube.pods(job.team.namespace, selector=f"gpuqueue.dev/job-id={job.pk}")


def save(job: Job, token: str, location: str) -> dict[str, Any]:
    """What the workload does after each save (gpuqueue.client.workload.register)."""
    return acknowledge(job.pk, token, location)


def test_a_drained_node_under_a_gang_checkpoints_it_and_requeues_it_whole(
    kube: Kube, submit: Any, settings: Any
) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    job = submit(workers=2, gpus_per_worker=8, annotations=LONG, checkpoint_grace_seconds=120)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.RUNNING)
    first_nodes = set(job.placement)
    secret = kube.core.read_namespaced_secret(token_secret_name(job.pk, 1), "team-a")
    token = base64.b64decode(secret.data["token"]).decode()
    # The workload saves now and then while it runs; the newest save is the one that counts.
    assert save(job, token, "s3://ckpt/step-100")["registered"] is True
    assert save(job, token, "s3://ckpt/step-200")["registered"] is True

    # kubectl drain: cordon, then evict every pod of the node through the eviction API.
    node = sorted(first_nodes)[0]
    kube.core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        drained(kube, job, node, token)
    finally:
        kube.core.patch_node(node, {"spec": {"unschedulable": False}})


def drained(kube: Kube, job: Job, node: str, token: str) -> None:
    kube.sync_until(lambda: state(job) == JobState.PREEMPTING)
    assert f"node {node} is being drained" in job.events.last().reason
    assert job.checkpoint_deadline is not None
    pods = gang_pods(kube, job)
    assert len(pods) == 2
    assert all(CHECKPOINT_ANNOTATION in p["metadata"]["annotations"] for p in pods)
    (evicted,) = [p for p in pods if p["spec"]["nodeName"] == node]
    kube.core.create_namespaced_pod_eviction(
        evicted["metadata"]["name"],
        "team-a",
        {"metadata": {"name": evicted["metadata"]["name"], "namespace": "team-a"}},
    )
    kube.wait(
        lambda: (
            all(p["metadata"]["uid"] != evicted["metadata"]["uid"] for p in gang_pods(kube, job))
            or any(p["metadata"].get("deletionTimestamp") for p in gang_pods(kube, job))
        )
    )
    # The evicted worker is no lost gang: the job still waits for its checkpoint.
    kube.sync_until(lambda: True)
    assert state(job) == JobState.PREEMPTING
    # On SIGTERM the workload saves once more and says so: that acknowledges the request.
    assert save(job, token, "s3://ckpt/step-250")["acknowledged"] is True
    kube.sync_until(lambda: state(job) == JobState.PENDING)
    assert job.checkpoint_location == "s3://ckpt/step-250" and job.start_failures == 0
    assert "checkpoint acknowledged" in job.events.last().reason
    # Requeued whole: the other worker goes too, with the Job.
    kube.wait(lambda: not gang_pods(kube, job), timeout=60)
    assert not [j for j in kube.jobs("team-a") if j["metadata"]["name"] == workload_name(job.pk, 1)]
    assert Node.objects.get(name=node).cordoned

    def resumed() -> bool:
        run_cycle(backend=kube.backend)
        return state(job) in (JobState.ADMITTED, JobState.RUNNING)

    kube.sync_until(resumed)
    assert node not in job.placement
    (k8s_job,) = [
        j for j in kube.jobs("team-a") if j["metadata"]["name"] == workload_name(job.pk, 2)
    ]
    env = {
        e["name"]: e.get("value", "")
        for e in k8s_job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["GPUQUEUE_RESUME"] == "1" and env["GPUQUEUE_CHECKPOINT"] == "s3://ckpt/step-250"
    kube.sync_until(lambda: state(job) == JobState.RUNNING)


def test_with_a_gang_pdb_a_drain_waits_for_the_checkpoint_instead_of_evicting_half_a_gang(
    kube: Kube, submit: Any, settings: Any
) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    kube.backend.options = ClusterOptions(public_url="http://gpuqueue.test", gang_pdb=True)
    job = submit(workers=2, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.RUNNING)
    name = workload_name(job.pk, 1)
    pdb = kube.json(
        client.PolicyV1Api(kube.api).read_namespaced_pod_disruption_budget(
            name, "team-a", _preload_content=False
        )
    )
    assert pdb["spec"]["minAvailable"] == 2
    assert pdb["metadata"]["ownerReferences"][0]["name"] == token_secret_name(job.pk, 1)
    secret = kube.core.read_namespaced_secret(token_secret_name(job.pk, 1), "team-a")
    token = base64.b64decode(secret.data["token"]).decode()
    node = sorted(job.placement)[0]
    (worker,) = [p for p in gang_pods(kube, job) if p["spec"]["nodeName"] == node]
    kube.core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        # kubectl drain retries this eviction until it is allowed: while the gang runs, never.
        with pytest.raises(ApiException) as refused:
            kube.core.create_namespaced_pod_eviction(
                worker["metadata"]["name"],
                "team-a",
                {"metadata": {"name": worker["metadata"]["name"], "namespace": "team-a"}},
            )
        assert refused.value.status == 429
        kube.sync_until(lambda: state(job) == JobState.PREEMPTING)
        assert len(gang_pods(kube, job)) == 2  # whole, asked to checkpoint
        assert save(job, token, "s3://ckpt/drained")["acknowledged"] is True
        kube.sync_until(lambda: state(job) == JobState.PENDING)
        # Requeued whole; its PDB goes with its Secret, and the drain can finish.
        kube.wait(lambda: not gang_pods(kube, job), timeout=60)
        kube.wait(
            lambda: (
                not client.PolicyV1Api(kube.api)
                .list_namespaced_pod_disruption_budget("team-a")
                .items
            ),
            timeout=60,
        )
    finally:
        kube.core.patch_node(node, {"spec": {"unschedulable": False}})
