"""On a real control plane: what stops a released gang for a moment is no failed start. A worker
that kube-scheduler briefly cannot bind (a pod gpuqueue did not make took its node's CPU right
after the release check) waits out the unschedulable grace and runs; pods the API refuses by
chance (an admission webhook that cannot be reached) are retried by the Job controller and run.
A refusal the API will repeat (a ResourceQuota) fails the start: test_lifecycle.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster import kubernetes as kubernetes_backend
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
WEBHOOK = "refuse-pods.gpuqueue.test"


def state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def gang_pods(kube: Kube, job: Job) -> list[dict[str, Any]]:
    return kube.pods(job.team.namespace, selector=f"gpuqueue.dev/job-id={job.pk}")


def unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def sync_for(kube: Kube, seconds: float, job: Job) -> None:
    """Run the cluster sync for `seconds`; the gang stays admitted, its start unfailed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sync_cluster(kube.backend)
        assert state(job) == JobState.ADMITTED, job.events.last().reason
        assert job.start_failures == 0
        time.sleep(0.5)


def test_a_released_worker_that_cannot_be_bound_for_a_few_seconds_still_runs(
    kube: Kube, submit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = submit(workers=2, gpus_per_worker=4, cpu_millicores=1000, annotations=LONG)
    run_cycle(backend=kube.backend)
    job.refresh_from_db()
    (node,) = job.placement
    # Between the release check (the node has room) and the gate coming off, a pod gpuqueue
    # did not make is bound to the node with all of its CPU: the worker, released, finds no
    # room there.
    real_releases = kubernetes_backend.releases
    hogged: list[str] = []

    def releases_then_hog(*args: Any) -> Any:
        out, held = real_releases(*args)
        if out and not hogged:
            hog = {
                "metadata": {"name": "cpu-hog", "namespace": "others"},
                "spec": {
                    "nodeName": node,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "128"}}}
                    ],
                },
            }
            kube.core.create_namespaced_pod("others", hog)
            hogged.append(node)
        return out, held

    monkeypatch.setattr(kubernetes_backend, "releases", releases_then_hog)
    kube.sync_until(lambda: any(unschedulable(p) for p in gang_pods(kube, job)))
    assert hogged == [node]
    assert not any(p["spec"].get("schedulingGates") for p in gang_pods(kube, job))
    sync_for(kube, 10, job)  # inside the grace: waiting, no failed start

    kube.core.delete_namespaced_pod("cpu-hog", "others", grace_period_seconds=0)
    kube.sync_until(lambda: state(job) == JobState.RUNNING, timeout=60)
    assert job.start_failures == 0 and job.attempts == 1
    assert {p["spec"]["nodeName"] for p in gang_pods(kube, job)} == {node}


def refusing_webhook() -> dict[str, Any]:
    """Pods created in team-a go through a webhook nobody serves: the API refuses them with
    "failed calling webhook" for as long as it is there."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK},
        "webhooks": [
            {
                "name": WEBHOOK,
                "clientConfig": {"url": "https://127.0.0.1:1/validate"},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 2,
            }
        ],
    }


def refused_by_webhook(kube: Kube) -> bool:
    probe = {
        "metadata": {"name": "probe", "namespace": "team-a"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    try:
        kube.core.create_namespaced_pod("team-a", probe, dry_run="All")
    except ApiException as exc:
        return "failed calling webhook" in str(exc.body)
    return False


def failed_create_events(kube: Kube) -> list[Any]:
    return kube.core.list_namespaced_event(
        "team-a", field_selector="involvedObject.kind=Job,reason=FailedCreate"
    ).items


def failed_creates(kube: Kube, before: set[str]) -> list[str]:
    """The FailedCreate messages of Jobs in team-a, leaving out events (uids in `before`) that
    earlier tests on the shared control plane left there."""
    return [str(e.message) for e in failed_create_events(kube) if e.metadata.uid not in before]


def test_pods_refused_by_chance_are_retried_and_the_gang_runs(kube: Kube, submit: Any) -> None:
    webhooks = client.AdmissionregistrationV1Api(kube.api)
    before = {e.metadata.uid for e in failed_create_events(kube)}
    webhooks.create_validating_webhook_configuration(refusing_webhook())
    try:
        kube.wait(lambda: refused_by_webhook(kube))
        job = submit(workers=2, gpus_per_worker=8, annotations=LONG)
        run_cycle(backend=kube.backend)
        kube.wait(lambda: bool(failed_creates(kube, before)))
        assert all("failed calling webhook" in m for m in failed_creates(kube, before))
        # Past the check for refused pods (kubernetes.REFUSAL_CHECK, 3 s): no failed start.
        sync_for(kube, 8, job)
        assert not gang_pods(kube, job)
    finally:
        webhooks.delete_validating_webhook_configuration(WEBHOOK)
    kube.wait(lambda: not refused_by_webhook(kube))
    # The Job controller creates the pods on its next try (it backs off up to a minute).
    kube.sync_until(lambda: state(job) == JobState.RUNNING, timeout=90)
    assert job.start_failures == 0 and job.attempts == 1
    assert len(gang_pods(kube, job)) == 2
