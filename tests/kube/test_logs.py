"""Reading a worker's log on a real control plane. kwok's fake kubelets serve no container logs
(its log server is off here), so the API server answers 404 for a running kwok pod: these tests
cover finding the pod, the call and the answers that are not a log (the lines themselves are
tested against kmock in tests/cluster/test_logs.py)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from gpuqueue.cluster.base import LogNotFound, LogQuery
from gpuqueue.core.errors import Refused
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from gpuqueue.services.cluster.logs import read_job_log
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


def running(kube: Kube, submit: Any, workers: int = 2) -> Job:
    job = submit(workers=workers, gpus_per_worker=4, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING)
    return Job.objects.get(pk=job.pk)


def test_gpuqueues_own_account_may_read_pod_logs(
    kube: Kube, submit: Any, as_gpuqueue: client.ApiClient
) -> None:
    """With the deploy/ RBAC the API server gets as far as the (fake) kubelet, whose 404 is
    the pod's; without `pods/log` it would refuse with 403 first."""
    job = running(kube, submit)
    backend = kube.new_backend()
    backend.core = client.CoreV1Api(as_gpuqueue)
    with pytest.raises(LogNotFound):
        backend.read_log(job.pk, 1, 1, LogQuery(tail_lines=10))
    pods = kube.pods(selector=f"gpuqueue.dev/job-id={job.pk}")
    with pytest.raises(client.ApiException) as raised:  # what the backend turned into LogNotFound
        client.CoreV1Api(as_gpuqueue).read_namespaced_pod_log(
            pods[0]["metadata"]["name"], "team-a", container="worker"
        )
    assert raised.value.status == 404


def test_a_gang_still_behind_its_gate_has_an_empty_log(kube: Kube, submit: Any) -> None:
    """Launched but not released (no sync ran): the pods exist without a node, and the API
    server answers their log with nothing at all (200, empty), which is what gpuqueue shows."""
    job = submit(workers=2, gpus_per_worker=4, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.wait(lambda: len(kube.pods(selector=f"gpuqueue.dev/job-id={job.pk}")) == 2)
    assert all(
        not p["spec"].get("nodeName") for p in kube.pods(selector=f"gpuqueue.dev/job-id={job.pk}")
    )
    log = read_job_log(Job.objects.get(pk=job.pk), 1, backend=kube.backend)
    assert (list(log.lines), log.attempt, log.truncated) == ([], 1, False)


def test_a_stopped_attempt_and_a_job_never_started_are_404(kube: Kube, submit: Any) -> None:
    job = running(kube, submit, workers=1)
    kube.backend.stop(job.pk, 1)
    kube.wait(lambda: not kube.pods(selector=f"gpuqueue.dev/job-id={job.pk}"))
    with pytest.raises(Refused) as refused:
        read_job_log(job, 0, backend=kube.backend)
    assert (refused.value.status, refused.value.message) == (
        404,
        f"job {job.pk} has no worker 0 in attempt 1",
    )
    pending = submit(workers=1, gpus_per_worker=64)  # fits nowhere: never starts
    with pytest.raises(Refused, match=f"job {pending.pk} has not started"):
        read_job_log(pending, 0, backend=kube.backend)
