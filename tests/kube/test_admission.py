"""On a real control plane, what deploy/ asks of admission: its policy keeps GPUs in team
namespaces behind the queue (nobody else, a cluster admin included, may create a workload there
whose pods ask for GPUs, while gpuqueue's own Jobs are admitted and the Job controller creates
their pods), and gpuqueue's own pods pass Pod Security "restricted"."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.base import LaunchSpec
from gpuqueue.cluster.k8s_calls import Caller
from gpuqueue.cluster.kubernetes import KubernetesBackend
from gpuqueue.cluster.manifests import ClusterOptions, job_manifest
from tests.kube.conftest import DEPLOY, Kube, apply

GUARDED = "team-guarded"


def gpu_container(gpus: int) -> dict[str, Any]:
    return {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}


def pod(name: str, gpus: int) -> dict[str, Any]:
    container = gpu_container(gpus) if gpus else {"name": "c", "image": "x"}
    return {"metadata": {"name": name}, "spec": {"containers": [container]}}


def deployment(gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "around-the-queue"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [gpu_container(gpus)]},
            },
        },
    }


def refusal(call: Callable[[], Any]) -> ApiException | None:
    try:
        call()
    except ApiException as exc:
        return exc
    return None


@pytest.fixture
def guarded(kube: Kube, as_gpuqueue: client.ApiClient) -> client.ApiClient:
    """A team namespace under the policy, with gpuqueue's RoleBinding there."""
    try:
        kube.core.create_namespace(
            {"metadata": {"name": GUARDED, "labels": {"gpuqueue.dev/team": "true"}}}
        )
    except ApiException as exc:
        if exc.status != 409:
            raise
    binding = yaml.safe_load_all((DEPLOY / "overlays/example/team-rolebindings.yaml").read_text())
    first = next(d for d in binding if d)
    first["metadata"]["namespace"] = GUARDED
    path = Path(kube.plane.workdir) / "guarded-rolebinding.yaml"
    path.write_text(yaml.safe_dump(first))
    apply(kube.api, path)
    admission = client.AdmissionregistrationV1Api(kube.api)
    for doc in yaml.safe_load_all((DEPLOY / "base/admission-policy.yaml").read_text()):
        create = (
            admission.create_validating_admission_policy
            if doc["kind"] == "ValidatingAdmissionPolicy"
            else admission.create_validating_admission_policy_binding
        )
        try:
            create(doc)
        except ApiException as exc:
            if exc.status != 409:
                raise
    # The API server takes the policy in within a second or two (and the namespace's default
    # ServiceAccount must exist before any pod is accepted there).
    deadline = time.monotonic() + 30
    for attempt in range(1000):
        refused = refusal(
            lambda n=f"probe-{attempt}": kube.core.create_namespaced_pod(GUARDED, pod(n, 1))
        )
        if refused is not None and "requested through gpuqueue" in str(refused.body):
            break
        assert time.monotonic() < deadline, f"the admission policy never took effect: {refused}"
        time.sleep(0.5)
    yield as_gpuqueue
    kube.batch.delete_collection_namespaced_job(
        GUARDED, propagation_policy="Background", grace_period_seconds=0
    )
    kube.core.delete_collection_namespaced_pod(GUARDED, grace_period_seconds=0)


def test_no_one_but_gpuqueue_creates_gpu_workloads_in_a_team_namespace(
    kube: Kube, guarded: client.ApiClient
) -> None:
    apps = client.AppsV1Api(kube.api)
    for call in (
        lambda: kube.core.create_namespaced_pod(GUARDED, pod("direct", 8)),
        lambda: apps.create_namespaced_deployment(GUARDED, deployment(8)),
    ):
        refused = refusal(call)
        assert refused is not None and refused.status == 403
        assert "requested through gpuqueue" in refused.body
    # What asks for no GPUs is none of the queue's business; elsewhere, neither is a GPU.
    assert refusal(lambda: kube.core.create_namespaced_pod(GUARDED, pod("cpu-only", 0))) is None
    assert refusal(lambda: kube.core.create_namespaced_pod("others", pod("elsewhere", 1))) is None
    kube.core.delete_namespaced_pod("elsewhere", "others", grace_period_seconds=0)

    # gpuqueue's own Job is admitted, and the Job controller creates its gang's pods.
    backend = KubernetesBackend(
        guarded,
        options=ClusterOptions(public_url="http://gpuqueue.test"),
        caller=Caller(attempts=1, backoff_seconds=0),
        namespaces=lambda: [GUARDED],
    )
    token = backend.launch(
        LaunchSpec(
            job_id=990001,
            attempt=1,
            team="guarded",
            namespace=GUARDED,
            name="through-the-queue",
            image="ghcr.io/acme/train:1",
            command=[],
            env={},
            labels={},
            annotations={},
            workers=2,
            gpus_per_worker=4,
            resource_name="nvidia.com/gpu",
            placement={"h100-2": 2},
            checkpoint_grace_seconds=30,
            max_runtime_seconds=None,
        )
    )
    assert token
    kube.wait(lambda: len(kube.pods(GUARDED, selector="gpuqueue.dev/job-id=990001")) == 2)


def test_gpuqueue_s_own_pods_pass_pod_security_restricted(kube: Kube) -> None:
    """Each Deployment of deploy/base, its pod template sent as a Pod (server-side dry run) to a
    namespace that enforces Pod Security "restricted": all are admitted."""
    namespace = "restricted"
    try:
        kube.core.create_namespace(
            {
                "metadata": {
                    "name": namespace,
                    "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
                }
            }
        )
        kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": "gpuqueue"}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    deployments = [
        doc
        for path in sorted((DEPLOY / "base").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") in ("Deployment", "Job")
    ]
    assert len(deployments) == 5  # web, worker, beat, watcher and the migration Job
    # The check itself: a pod without the settings is refused there.
    bare = refusal(
        lambda: kube.core.create_namespaced_pod(namespace, pod("bare", 0), dry_run="All")
    )
    assert bare is not None and "violates PodSecurity" in str(bare.body)
    for deployment in deployments:
        template = deployment["spec"]["template"]
        body = {"metadata": {"name": deployment["metadata"]["name"]}, "spec": template["spec"]}
        refused = refusal(
            lambda body=body: kube.core.create_namespaced_pod(namespace, body, dry_run="All")
        )
        assert refused is None, (deployment["metadata"]["name"], refused and refused.body)


def test_every_manifest_in_deploy_is_accepted_by_the_api_server(kube: Kube) -> None:
    """Each object of deploy/ (base and the example overlay) sent as a server-side dry run:
    the real API server's validation and admission, not only the client's models."""
    from kubernetes import utils

    try:
        kube.core.create_namespace({"metadata": {"name": "gpuqueue"}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    docs = [
        doc
        for path in sorted(DEPLOY.rglob("*.yaml"))
        if path.name != "kustomization.yaml" and "helm" not in path.relative_to(DEPLOY).parts
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    assert len(docs) > 20
    for doc in docs:
        namespace = (doc.get("metadata") or {}).get("namespace") or "gpuqueue"
        try:
            utils.create_from_dict(kube.api, doc, namespace=namespace, dry_run="All")
        except utils.FailToCreateError as failure:
            (refused,) = failure.api_exceptions
            # Objects the cluster of these tests already has (team namespaces, the policy).
            assert refused.status == 409, (doc["kind"], doc["metadata"]["name"], refused.body)
    assert client.AppsV1Api(kube.api).list_namespaced_deployment("gpuqueue").items == []  # dry
    # And the server does judge: the same web Deployment with a negative replica count is not.
    (web,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpuqueue-web"
    ]
    broken = {**web, "spec": {**web["spec"], "replicas": -1}}
    with pytest.raises(utils.FailToCreateError) as failure:
        utils.create_from_dict(kube.api, broken, namespace="gpuqueue", dry_run="All")
    assert failure.value.api_exceptions[0].status == 422


WORKLOAD = LaunchSpec(
    job_id=990002,
    attempt=1,
    team="restricted",
    namespace="restricted-jobs",
    name="restricted",
    image="ghcr.io/acme/train:1",
    command=["python", "train.py"],
    env={"EPOCHS": "3"},
    labels={},
    annotations={},
    workers=2,
    gpus_per_worker=4,
    resource_name="nvidia.com/gpu",
    placement={"h100-1": 2},
    checkpoint_grace_seconds=30,
    max_runtime_seconds=3600,
    cpu_millicores=16000,
    memory_mib=65536,
)


def test_a_job_s_pods_pass_pod_security_restricted_with_its_workload_spec(kube: Kube) -> None:
    """The pods of a gpuqueue Job, as they are by default and with volumes, pull secrets,
    envFrom, a priority class, a ServiceAccount and limits, sent as server-side dry runs to a
    namespace that enforces "restricted": the Job and its pod template are admitted."""
    namespace = WORKLOAD.namespace
    for create in (
        lambda: kube.core.create_namespace(
            {
                "metadata": {
                    "name": namespace,
                    "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
                }
            }
        ),
        lambda: kube.core.create_namespaced_service_account(
            namespace, {"metadata": {"name": "trainer"}}
        ),
        lambda: client.SchedulingV1Api(kube.api).create_priority_class(
            {"metadata": {"name": "gpu-batch"}, "value": 1000}
        ),
    ):
        refused = refusal(create)
        assert refused is None or refused.status == 409, refused
    kube.wait(
        lambda: any(
            sa.metadata.name == "default"
            for sa in kube.core.list_namespaced_service_account(namespace).items
        )
    )
    full = replace(
        WORKLOAD,
        cpu_limit_millicores=16000,
        memory_limit_mib=65536,
        shm_mib=8192,
        volumes=(
            {"claim": "imagenet", "mount_path": "/data", "read_only": True},
            {"claim": "scratch", "mount_path": "/scratch", "read_only": False},
        ),
        image_pull_secrets=("ghcr-pull",),
        env_from_secrets=("wandb",),
        priority_class="gpu-batch",
        service_account="trainer",
    )
    hostnames = {"h100-1": "h100-1"}
    options = ClusterOptions(public_url="http://gpuqueue.test")
    # The check itself: the same pod as root-capable as a container may be is refused there.
    loose = job_manifest(WORKLOAD, options, hostnames)["spec"]["template"]
    loose["spec"].pop("securityContext")
    loose["spec"]["containers"][0].pop("securityContext")
    bare = refusal(
        lambda: kube.core.create_namespaced_pod(
            namespace, {"metadata": {"name": "loose"}, "spec": loose["spec"]}, dry_run="All"
        )
    )
    assert bare is not None and "violates PodSecurity" in str(bare.body)
    for spec in (WORKLOAD, full):
        job = job_manifest(spec, options, hostnames)
        template = job["spec"]["template"]
        pod = {"metadata": {"name": "worker", **template["metadata"]}, "spec": template["spec"]}
        refused = refusal(
            lambda pod=pod: kube.core.create_namespaced_pod(namespace, pod, dry_run="All")
        )
        assert refused is None, refused and refused.body
        refused = refusal(
            lambda job=job: kube.batch.create_namespaced_job(namespace, job, dry_run="All")
        )
        assert refused is None, refused and refused.body
    assert kube.batch.list_namespaced_job(namespace).items == []  # dry runs only
