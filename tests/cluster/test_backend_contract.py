"""Contract tests: the Kubernetes backend with the official client against the kmock emulator
over HTTP. What is created, patched and deleted; 409 adopted; 429/500/timeouts retried; 403 and
422 fail the job with the API's message."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import kmock
import pytest

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.base import ClusterError, Phase
from gpuqueue.core.states import JobState
from gpuqueue.cycle.launch import launch_admitted, launch_spec
from gpuqueue.models import Job, WorkloadRecord
from gpuqueue.services.jobs.checkpoint import job_for_token
from tests.cluster.conftest import JOBS, PODS, SECRETS, SERVICES, add_nodes, node, run_job_pods


def status_error(code: int, reason: str, message: str) -> Any:
    return kmock.KubernetesError(status=code, reason=reason, message=message)


@pytest.fixture
def admitted(world: Any, submit: Any) -> Job:
    """A two-worker job of team-a, admitted onto h100-0 and h100-1 (as the cycle would)."""
    job = submit(workers=2, gpus_per_worker=8, env={"LR": "0.1"})
    Job.objects.filter(pk=job.pk).update(
        state=JobState.ADMITTED,
        attempts=1,
        placement={"h100-0": 1, "h100-1": 1},
        admitted_at=datetime.now(UTC),
    )
    job.refresh_from_db()
    return job


def test_launch_creates_the_secret_service_and_indexed_job_and_stores_the_token_hash(
    emulator: Any, k8s: Any, admitted: Job
) -> None:
    add_nodes(emulator.api(), node("h100-0"), node("h100-1"))
    launch_admitted([admitted.pk], k8s)

    name = f"gq-{admitted.pk}-1"
    (job,) = emulator.objects(JOBS).values()
    (secret,) = emulator.objects(SECRETS).values()
    hostnames = {"h100-0": "h100-0", "h100-1": "h100-1"}
    made = {**job, "metadata": {k: v for k, v in job["metadata"].items() if k != "uid"}}
    assert made == mf.job_manifest(launch_spec(admitted), k8s.options, hostnames, secret)
    assert job["metadata"]["ownerReferences"][0]["uid"] == secret["metadata"]["uid"]
    assert set(emulator.objects(SERVICES)) == {("team-a", name)}
    token = secret["stringData"]["token"]
    assert job_for_token(token).pk == admitted.pk
    # The uids the API gave the Secret and the Job are recorded: the proof the sync checks.
    record = WorkloadRecord.objects.get(job_id=admitted.pk, attempt=1)
    assert (record.namespace, record.secret_uid, record.job_uid) == (
        "team-a",
        secret["metadata"]["uid"],
        job["metadata"]["uid"],
    )
    posts = [r.url.path for r in emulator.requests("POST", "/namespaces/")]
    assert posts == [
        "/api/v1/namespaces/team-a/configmaps",  # the install's marker, once per process
        "/api/v1/namespaces/team-a/secrets",
        "/api/v1/namespaces/team-a/services",
        "/apis/batch/v1/namespaces/team-a/jobs",
    ]


def test_launching_twice_adopts_what_exists_and_keeps_the_token(
    emulator: Any, k8s: Any, admitted: Job
) -> None:
    launch_admitted([admitted.pk], k8s)
    launch_admitted([admitted.pk], k8s)

    assert len(emulator.objects(JOBS)) == 1 and len(emulator.objects(SECRETS)) == 1
    (secret,) = emulator.objects(SECRETS).values()
    assert job_for_token(secret["stringData"]["token"]).pk == admitted.pk  # not rotated
    assert len(emulator.requests("POST", "/jobs")) == 2  # a 409, adopted
    assert len(emulator.requests("POST", "/secrets")) == 2


def test_a_500_on_create_is_retried_with_backoff(emulator: Any, k8s: Any, admitted: Job) -> None:
    emulator.fail("POST", "/jobs", 500, "etcd leader changed", times=2)
    k8s.launch(launch_spec(admitted))

    assert len(emulator.requests("POST", "/jobs")) == 3
    assert k8s.slept == [0.5, 1.0]
    assert len(emulator.objects(JOBS)) == 1


def test_a_create_that_committed_but_answered_500_is_adopted_on_retry(
    emulator: Any, k8s: Any, admitted: Job
) -> None:
    # kmock's own reaction strikes after it stored the Job: the retry meets a 409 and adopts.
    emulator.kmock["post", JOBS][:1] << status_error(500, "InternalError", "timeout writing")
    k8s.launch(launch_spec(admitted))

    assert len(emulator.requests("POST", "/jobs")) == 2
    assert len(emulator.objects(JOBS)) == 1


def test_429_on_every_attempt_leaves_the_job_admitted_for_the_next_sync(
    emulator: Any, k8s: Any, admitted: Job
) -> None:
    emulator.fail("POST", "/services", 429, "slow down", times=3)
    launch_admitted([admitted.pk], k8s)

    admitted.refresh_from_db()
    assert admitted.state == JobState.ADMITTED
    assert len(emulator.requests("POST", "/services")) == 3
    assert not emulator.objects(JOBS)
    launch_admitted([admitted.pk], k8s)  # the next sync's relaunch goes through
    assert len(emulator.objects(JOBS)) == 1


@pytest.mark.parametrize("code, reason", [(403, "Forbidden"), (422, "Invalid")])
def test_403_and_422_fail_the_job_with_the_apis_message(
    emulator: Any, k8s: Any, admitted: Job, code: int, reason: str
) -> None:
    message = f'jobs "gq-{admitted.pk}-1" is forbidden: exceeded quota: gpu-quota'
    emulator.fail("POST", "/jobs", code, message)
    launch_admitted([admitted.pk], k8s)

    admitted.refresh_from_db()
    assert admitted.state == JobState.FAILED
    assert message in admitted.message
    assert len(emulator.requests("POST", "/jobs")) == 1  # no retry of a refusal


def test_a_timeout_is_retried_then_reported_as_transient_and_unhealthy(
    emulator: Any, make_backend: Any, admitted: Job
) -> None:
    health: list[tuple[bool, str]] = []
    backend = make_backend(timeout_seconds=0.2)
    backend.call.on_health = lambda ok, detail: health.append((ok, detail))
    emulator.delay("GET", "/nodes", 1.0, times=3)

    with pytest.raises(ClusterError) as error:
        backend.list_nodes()
    assert error.value.transient
    assert len(emulator.requests("GET", "/nodes")) == 3
    assert health[-1][0] is False and "ReadTimeoutError" in health[-1][1]


def test_request_checkpoint_annotates_every_pod_of_the_attempt_once(
    emulator: Any, k8s: Any, admitted: Job
) -> None:
    launch_admitted([admitted.pk], k8s)  # records the Job's uid, which its pods name
    (job,) = emulator.objects(JOBS).values()
    run_job_pods(emulator.api(), job, ["h100-0", "h100-1"])
    deadline = datetime(2026, 11, 22, 10, 2, tzinfo=UTC)

    k8s.request_checkpoint(admitted.pk, 1, deadline)
    k8s.request_checkpoint(admitted.pk, 1, deadline)  # idempotent: nothing more to patch

    patches = emulator.requests("PATCH")
    assert len(patches) == 2
    assert {p.headers["Content-Type"] for p in patches} == {"application/merge-patch+json"}
    assert all(json.loads(p.body) == mf.checkpoint_patch(deadline) for p in patches)
    for pod in emulator.objects(PODS).values():
        assert pod["metadata"]["annotations"][mf.CHECKPOINT_ANNOTATION] == "2026-11-22T10:02:00Z"


def test_stop_deletes_the_job_service_and_secret_and_is_idempotent(
    emulator: Any, k8s: Any, admitted: Job
) -> None:
    k8s.launch(launch_spec(admitted))
    uids = {
        obj["kind"]: obj["metadata"]["uid"]
        for objects in (emulator.objects(JOBS), emulator.objects(SECRETS))
        for obj in objects.values()
    }
    k8s.stop(admitted.pk, 1)
    k8s.stop(admitted.pk, 1)  # 404s: already gone is success

    assert not emulator.objects(JOBS) and not emulator.objects(SERVICES)
    assert not emulator.objects(SECRETS)
    deletes = emulator.requests("DELETE")
    assert len(deletes) == 3  # the second stop finds nothing left to delete
    bodies = [json.loads(d.body) for d in deletes]
    assert all(b["propagationPolicy"] == "Background" for b in bodies)
    # Each delete holds only while the object is still the one gpuqueue proved it made.
    assert bodies[0]["preconditions"] == {"uid": uids["Job"]}
    assert bodies[2]["preconditions"] == {"uid": uids["Secret"]}


def test_observe_and_list_nodes_read_jobs_pods_and_nodes(
    emulator: Any, k8s: Any, admitted: Job
) -> None:
    api = emulator.api()
    add_nodes(api, node("h100-0"), node("h100-1"))
    k8s.launch(launch_spec(admitted))
    (job,) = emulator.objects(JOBS).values()
    run_job_pods(api, job, ["h100-0", "h100-1"])
    # A pod gpuqueue did not create holds 2 GPUs of h100-1.
    from kubernetes import client

    client.CoreV1Api(api).create_namespaced_pod(
        "other",
        {
            "metadata": {"name": "notebook", "namespace": "other"},
            "spec": {
                "nodeName": "h100-1",
                "containers": [
                    {
                        "name": "c",
                        "image": "jupyter",
                        "resources": {"limits": {"nvidia.com/gpu": "2"}},
                    }
                ],
            },
            "status": {"phase": "Running"},
        },
    )

    nodes = {n.name: n for n in k8s.list_nodes()}
    (status,) = k8s.observe()
    assert nodes["h100-1"].used_externally == {"nvidia.com/gpu": 2}
    assert nodes["h100-0"].used_externally == {}
    assert (status.job_id, status.attempt, status.phase) == (admitted.pk, 1, Phase.RUNNING)
    # Jobs are listed per team namespace (the RBAC grants them nowhere else).
    assert {r.url.path for r in emulator.requests("GET", "/jobs")} == {
        "/apis/batch/v1/namespaces/team-a/jobs",
        "/apis/batch/v1/namespaces/team-b/jobs",
    }


def test_a_missing_team_namespace_fails_the_launch_for_good(
    emulator: Any, k8s: Any, admitted: Job
) -> None:
    emulator.fail("POST", "/secrets", 404, 'namespaces "team-a" not found')
    with pytest.raises(ClusterError) as error:
        k8s.launch(launch_spec(admitted))
    assert not error.value.transient and 'namespaces "team-a" not found' in str(error.value)
