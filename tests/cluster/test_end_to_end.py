"""End to end: submit → admit → running → preempt → checkpoint acknowledged → requeued →
resumed with the checkpoint location → succeeded, every step an event; once on the simulated
cluster, once on the Kubernetes backend against kmock (the test plays the Job controller and
the kubelet, and the workload acknowledges through gpuqueue/client/workload.py over real HTTP)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client

from gpuqueue.celery import app as celery_app
from gpuqueue.client import workload
from gpuqueue.cluster import manifests as mf
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, JobEvent, SimulatedWorkload
from tests.cluster.conftest import JOBS, PODS, SECRETS, add_nodes, node, run_job_pods

SIM_DURATION = "gpuqueue.dev/sim-duration-seconds"
STORY = [
    "PENDING",
    "ADMITTED",
    "RUNNING",
    "PREEMPTING",
    "PREEMPTING",
    "PENDING",
    "ADMITTED",
    "RUNNING",
    "SUCCEEDED",
]


def timeline(job: Job) -> list[tuple[str, str]]:
    return list(
        JobEvent.objects.filter(job=job).order_by("at", "id").values_list("to_state", "reason")
    )


def test_preempted_job_checkpoints_and_resumes_on_the_simulated_cluster(
    world: Any, submit: Any, backend: Any, settings: Any
) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    sync_cluster(backend)
    # A research job fills the H100 pool; then production work of the same team comes first.
    big = submit(workers=4, gpus_per_worker=8, annotations={SIM_DURATION: "600"})
    assert run_cycle(backend=backend).admitted == [big.pk]
    sync_cluster(backend)
    claim = submit(workers=1, gpus_per_worker=8, priority=10, annotations={SIM_DURATION: "0"})

    assert run_cycle(backend=backend).preempted == [big.pk]
    sync_cluster(backend)  # the simulated workload acknowledges at once: requeued
    big.refresh_from_db()
    assert big.state == JobState.PENDING and big.checkpoint_location.startswith("sim://")
    run_cycle(backend=backend)  # admits the claim
    sync_cluster(backend)  # the claim ran for 0 s
    assert Job.objects.get(pk=claim.pk).state == JobState.SUCCEEDED
    assert run_cycle(backend=backend).admitted == [big.pk]

    resumed = SimulatedWorkload.objects.get(job_id=big.pk, attempt=2)
    assert resumed.env["GPUQUEUE_RESUME"] == "1" and resumed.env["GPUQUEUE_ATTEMPT"] == "2"
    assert resumed.env["GPUQUEUE_CHECKPOINT"] == big.checkpoint_location
    sync_cluster(backend)
    SimulatedWorkload.objects.filter(pk=resumed.pk).update(ends_at=datetime.now(UTC))
    sync_cluster(backend)
    big.refresh_from_db()
    assert big.state == JobState.SUCCEEDED and big.attempts == 2
    assert [state for state, _ in timeline(big)] == STORY


def test_preempted_job_checkpoints_and_resumes_on_kubernetes(
    transactional_db: Any,
    world: Any,
    submit: Any,
    make_backend: Any,
    emulator: Any,
    live_server: Any,
    settings: Any,
    tmp_path: Path,
    monkeypatch: Any,
) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    api = emulator.api()
    add_nodes(api, *(node(f"h100-{i}") for i in range(4)))
    k8s = make_backend()
    sync_cluster(k8s)
    big = submit(workers=4, gpus_per_worker=8, env={"LR": "0.1"})

    # 1. Admitted and launched; the controller starts every worker: the gang is running.
    assert run_cycle(backend=k8s).admitted == [big.pk]
    job_manifest = emulator.objects(JOBS)[("team-a", mf.workload_name(big.pk, 1))]
    run_job_pods(api, job_manifest, [f"h100-{i}" for i in range(4)])
    sync_cluster(k8s)
    assert Job.objects.get(pk=big.pk).state == JobState.RUNNING

    # 2. Production work of the same team comes first: every pod is asked to checkpoint.
    submit(workers=1, gpus_per_worker=8, priority=10)
    assert run_cycle(backend=k8s).preempted == [big.pk]
    pods = [p for p in emulator.objects(PODS).values() if mf.attempt_of(p) == (big.pk, 1)]
    assert len(pods) == 4
    deadline = pods[0]["metadata"]["annotations"][mf.CHECKPOINT_ANNOTATION]

    # 3. The workload reads it from its downward-API file (written here, as the kubelet would)
    #    and acknowledges with the token from its Secret, over HTTP to the live server.
    annotations = tmp_path / "annotations"
    annotations.write_text(
        "".join(f'{k}="{v}"\n' for k, v in pods[0]["metadata"]["annotations"].items())
    )
    secret = emulator.objects(SECRETS)[("team-a", mf.token_secret_name(big.pk, 1))]
    token = (
        secret.get("stringData", {}).get("token")
        or base64.b64decode(secret["data"]["token"]).decode()
    )
    # The acknowledgement sends no task: the watcher's next pass (here, the test's) requeues.
    sent: list[Any] = []
    monkeypatch.setattr(celery_app, "send_task", lambda *a, **k: sent.append(a))
    monkeypatch.setenv("GPUQUEUE_URL", live_server.url)
    monkeypatch.setenv("GPUQUEUE_JOB_ID", str(big.pk))
    monkeypatch.setenv("GPUQUEUE_JOB_TOKEN", token)
    assert workload.checkpoint_requested(str(annotations))
    assert workload.checkpoint_deadline(str(annotations)) is not None and deadline.endswith("Z")
    assert workload.acknowledge("s3://ckpt/big/step-900", backoff=0) is True
    assert sent == []

    # 4. The sync requeues the job and deletes its Kubernetes Job, Service and Secret.
    sync_cluster(k8s)
    big.refresh_from_db()
    assert big.state == JobState.PENDING and big.checkpoint_location == "s3://ckpt/big/step-900"
    sync_cluster(k8s)  # stops after the commit that requeued
    assert ("team-a", mf.workload_name(big.pk, 1)) not in emulator.objects(JOBS)
    # Its pods hold their GPUs until they are gone (the garbage collector's part, which kmock
    # does not play): only then is the node offered again.
    for key, pod in list(emulator.objects(PODS).items()):
        if mf.attempt_of(pod) == (big.pk, 1):
            client.CoreV1Api(api).delete_namespaced_pod(key[1], key[0])
    sync_cluster(k8s)

    # 5. The claim runs and ends; the job is admitted again and resumes from its checkpoint.
    run_cycle(backend=k8s)
    (claim_key,) = [k for k in emulator.objects(JOBS) if not k[1].startswith(f"gq-{big.pk}-")]
    _complete(api, *claim_key)
    sync_cluster(k8s)
    assert run_cycle(backend=k8s).admitted == [big.pk]
    resumed = emulator.objects(JOBS)[("team-a", mf.workload_name(big.pk, 2))]
    env = {
        e["name"]: e.get("value")
        for e in resumed["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["GPUQUEUE_RESUME"] == "1" and env["GPUQUEUE_ATTEMPT"] == "2"
    assert env["GPUQUEUE_CHECKPOINT"] == "s3://ckpt/big/step-900"
    run_job_pods(api, resumed, [f"h100-{i}" for i in range(4)])
    sync_cluster(k8s)
    _complete(api, "team-a", mf.workload_name(big.pk, 2))
    sync_cluster(k8s)

    big.refresh_from_db()
    assert big.state == JobState.SUCCEEDED and big.attempts == 2 and big.exit_code == 0
    events = timeline(big)
    assert [state for state, _ in events] == STORY
    assert "checkpoint acknowledged: s3://ckpt/big/step-900" in events[4][1]


def _complete(api: client.ApiClient, namespace: str, name: str) -> None:
    """What the Job controller writes when every index succeeded."""
    now = datetime.now(UTC) - timedelta(seconds=1)
    client.BatchV1Api(api).patch_namespaced_job_status(
        name,
        namespace,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Complete",
                        "status": "True",
                        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }
                ],
                "completionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        },
        _content_type="application/merge-patch+json",
    )
