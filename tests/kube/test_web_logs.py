"""The web reads workers' logs with its own ServiceAccount (deploy/base: gpuqueue-web), which
may find the pod and read its log in a team namespace and do nothing else, nor list pods in any
other namespace. kwok serves no container logs, so the API server answers a running pod's log
with the kubelet's 404: the account got past RBAC (a 403 would come first)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.core.errors import Refused
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from gpuqueue.services.cluster.logs import read_job_log
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


@pytest.fixture
def as_web(kube: Kube, as_gpuqueue: client.ApiClient) -> client.ApiClient:
    """A client holding a token of the web's ServiceAccount, bound as deploy/ binds it (the
    objects as_gpuqueue applies)."""
    token = kube.core.create_namespaced_service_account_token(
        "gpuqueue-web", "gpuqueue", {"spec": {"expirationSeconds": 3600}}
    ).status.token
    configuration = copy.deepcopy(as_gpuqueue.configuration)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def test_the_web_reads_a_workers_log_with_its_own_account_and_may_do_nothing_else(
    kube: Kube, submit: Any, as_web: client.ApiClient
) -> None:
    job = submit(workers=2, gpus_per_worker=4, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING)
    web = kube.new_backend()
    web.core = client.CoreV1Api(as_web)
    with pytest.raises(Refused) as refused:  # the kubelet's 404, through gpuqueue's answer
        read_job_log(Job.objects.get(pk=job.pk), 1, backend=web)
    assert refused.value.status in (404, 409), refused.value.message
    assert "forbidden" not in refused.value.message.lower()
    name = kube.pods(selector=f"gpuqueue.dev/job-id={job.pk}")[0]["metadata"]["name"]
    # Pods are listed in team namespaces only: not cluster-wide, not in another namespace.
    pods = client.CoreV1Api(as_web).list_namespaced_pod("team-a").items
    assert name in [p.metadata.name for p in pods]
    for elsewhere in (
        lambda: client.CoreV1Api(as_web).list_pod_for_all_namespaces(),
        lambda: client.CoreV1Api(as_web).list_namespaced_pod("gpuqueue"),
        lambda: client.CoreV1Api(as_web).list_namespaced_pod("kube-system"),
    ):
        with pytest.raises(ApiException) as denied:
            elsewhere()
        assert denied.value.status == 403
    with pytest.raises(ApiException) as denied:
        client.CoreV1Api(as_web).delete_namespaced_pod(name, "team-a")
    assert denied.value.status == 403
    with pytest.raises(ApiException) as denied:
        client.BatchV1Api(as_web).list_namespaced_job("team-a")
    assert denied.value.status == 403
