"""`make kube` makes the test cluster one that deploy/ installed gpuqueue into: gpuqueue's
ServiceAccount with deploy/base's rights, the admission policy, team namespaces labelled and
granted as the example overlay does, and a kubeconfig that acts as that ServiceAccount, with
which gpuqueue runs a job end to end while the policy refuses the admin's GPU pod."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from tests.kube.conftest import DEPLOY, Kube
from tests.kube.controlplane import api_client_for, install_as_deploy

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
GPU_POD = {
    "metadata": {"name": "around-the-queue"},
    "spec": {
        "containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]
    },
}


@pytest.fixture
def installed(kube: Kube, tmp_path: Path) -> Iterator[Path]:
    admin = tmp_path / "kubeconfig"
    admin.write_text(kube.plane.kubeconfig.read_text())
    try:
        yield install_as_deploy(kube.api, ["team-a", "team-b"], admin)
    finally:
        # The policy covers every namespace but its exempt list, the session's `others` among
        # them, where other tests make GPU pods as the admin: it must not outlive this test.
        admission = client.AdmissionregistrationV1Api(kube.api)
        policies = ("admission-policy.yaml", "admission-policy-frameworks.yaml")
        docs = [
            d for name in policies for d in yaml.safe_load_all((DEPLOY / "base" / name).read_text())
        ]
        for doc in docs:
            if not doc:
                continue
            delete = (
                admission.delete_validating_admission_policy
                if doc["kind"] == "ValidatingAdmissionPolicy"
                else admission.delete_validating_admission_policy_binding
            )
            try:
                delete(doc["metadata"]["name"])
            except ApiException as exc:
                if exc.status != 404:
                    raise
        kube.wait(lambda: _refused(kube) is None)


def _refused(kube: Kube) -> ApiException | None:
    try:
        kube.core.create_namespaced_pod("team-a", GPU_POD, dry_run="All")
    except ApiException as exc:
        return exc
    return None


def test_make_kube_installs_what_deploy_installs_and_gpuqueue_runs_as_its_serviceaccount(
    kube: Kube, installed: Path, submit: Any
) -> None:
    as_gpuqueue = api_client_for(installed)
    review = client.AuthenticationV1Api(as_gpuqueue).create_self_subject_review({})
    assert review.status.user_info.username == "system:serviceaccount:gpuqueue:gpuqueue"
    labels = kube.core.read_namespace("team-a").metadata.labels
    assert labels["gpuqueue.dev/team"] == "team-a"
    # The policy is in force: the admin's GPU pod in a team namespace is refused ...
    kube.wait(lambda: _refused(kube) is not None and _refused(kube).status == 403)
    # ... while gpuqueue, with its ServiceAccount's rights alone, runs a gang to RUNNING.
    backend = kube.new_backend()
    backend.api_client = as_gpuqueue
    backend.core = client.CoreV1Api(as_gpuqueue)
    backend.batch = client.BatchV1Api(as_gpuqueue)
    job = submit(workers=2, gpus_per_worker=4, annotations=LONG)
    run_cycle(backend=backend)
    kube.sync_until(lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING, backend=backend)
    # And again: `make kube` twice (or after a change of deploy/) applies, never fails.
    install_as_deploy(kube.api, ["team-a", "team-b"], installed.with_name("kubeconfig"))
