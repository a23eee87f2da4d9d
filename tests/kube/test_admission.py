"""On a real control plane, what deploy/ asks of admission: its policy keeps GPUs behind the
queue in every namespace but its exempt list (nobody else, a cluster admin included, may make a
workload there whose pods ask for GPUs, claim devices, tolerate the GPU taint or pick GPUs by
environment, nor carry gpuqueue's labels, while gpuqueue's own Jobs are admitted and the Job
controller creates their pods), the chart renders the same policies, and gpuqueue's own pods pass
Pod Security "restricted"."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
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
from gpuqueue.cluster.manifests import (
    LABEL_ATTEMPT,
    LABEL_JOB_ID,
    MANAGED_BY,
    MANAGED_BY_VALUE,
    ClusterOptions,
    job_manifest,
)
from tests.kube.conftest import DEPLOY, Kube, apply
from tests.kube.controlplane import Unavailable, api_client_for
from tests.kube.helm import CHART, NEWEST_KUBERNETES, helm, helm_binary, render

GUARDED = "team-guarded"
QUEUE_MESSAGE = "requested through gpuqueue"
MIG = "nvidia.com/mig-1g.10gb"
# gpuqueue's labels, as on the objects of attempt 1 of job 990003.
FORGED = {MANAGED_BY: MANAGED_BY_VALUE, LABEL_JOB_ID: "990003", LABEL_ATTEMPT: "1"}
POLICY = DEPLOY / "base" / "admission-policy.yaml"
FRAMEWORKS_POLICY = DEPLOY / "base" / "admission-policy-frameworks.yaml"


def gpu_container(gpus: int, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {"name": "c", "image": "x", "resources": {"limits": {resource: str(gpus)}}}


def pod(name: str, gpus: int, **spec: Any) -> dict[str, Any]:
    container = gpu_container(gpus) if gpus else {"name": "c", "image": "x"}
    return {"metadata": {"name": name}, "spec": {"containers": [container], **spec}}


def template(pod_spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "x", **(labels or {})}}, "spec": pod_spec}


def deployment(
    gpus: int, name: str = "around-the-queue", replicas: int = 1, **spec: Any
) -> dict[str, Any]:
    containers = [gpu_container(gpus) if gpus else {"name": "c", "image": "x"}]
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "x"}},
            "template": template({"containers": containers, **spec}),
        },
    }


def refusal(call: Callable[[], Any]) -> ApiException | None:
    try:
        call()
    except ApiException as exc:
        return exc
    return None


def refused_by_policy(call: Callable[[], Any], says: str = QUEUE_MESSAGE) -> None:
    refused = refusal(call)
    assert refused is not None, "admitted"
    assert refused.status == 403 and says in str(refused.body), refused.body


def impersonating(kube: Kube, user: str) -> client.CoreV1Api:
    """The cluster admin's client acting as `user` (Impersonate-User), as anyone granted
    `impersonate` on ServiceAccounts could."""
    api = api_client_for(kube.plane.kubeconfig)
    api.set_default_header("Impersonate-User", user)
    return client.CoreV1Api(api)


class Guard:
    """deploy/base's admission policy in the test cluster, for one test. It covers every
    namespace but its exempt list, the session's `others` among them, so it never outlives the
    test (other tests create GPU pods there as the cluster admin)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.admission = client.AdmissionregistrationV1Api(kube.api)
        self.docs = [d for d in yaml.safe_load_all(POLICY.read_text()) if d]

    def install(self) -> None:
        for doc in self.docs:
            create = (
                self.admission.create_validating_admission_policy
                if doc["kind"] == "ValidatingAdmissionPolicy"
                else self.admission.create_validating_admission_policy_binding
            )
            create(doc)
        # The API server takes the policy in within a second or two.
        self._wait(lambda refused: refused is not None and QUEUE_MESSAGE in str(refused.body))

    def remove(self) -> None:
        for doc in self.docs:
            delete = (
                self.admission.delete_validating_admission_policy
                if doc["kind"] == "ValidatingAdmissionPolicy"
                else self.admission.delete_validating_admission_policy_binding
            )
            refused = refusal(lambda delete=delete, doc=doc: delete(doc["metadata"]["name"]))
            assert refused is None or refused.status == 404, refused
        self._wait(lambda refused: refused is None)

    def _wait(self, done: Callable[[ApiException | None], bool]) -> None:
        """Until a GPU pod sent to the guarded namespace (a dry run) meets `done`."""
        deadline = time.monotonic() + 30
        while True:
            refused = refusal(
                lambda: self.kube.core.create_namespaced_pod(
                    GUARDED, pod("probe", 1), dry_run="All"
                )
            )
            if done(refused):
                return
            assert time.monotonic() < deadline, f"the policy did not change in time: {refused}"
            time.sleep(0.3)


@pytest.fixture
def guard(kube: Kube) -> Iterator[Guard]:
    """A team namespace (`team-guarded`, labelled as deploy/overlays/example labels them),
    gpuqueue's RoleBinding there, and the policy, not yet installed: a test installs it when
    what it needs is in place."""
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
    # Pods are refused until the controller-manager made the namespace's `default` account.
    kube.wait(
        lambda: any(
            sa.metadata.name == "default"
            for sa in kube.core.list_namespaced_service_account(GUARDED).items
        )
    )
    policy = Guard(kube)
    yield policy
    policy.remove()
    apps = client.AppsV1Api(kube.api)
    apps.delete_collection_namespaced_deployment(GUARDED, propagation_policy="Background")
    apps.delete_collection_namespaced_stateful_set(GUARDED, propagation_policy="Background")
    apps.delete_collection_namespaced_replica_set(GUARDED, propagation_policy="Background")
    kube.batch.delete_collection_namespaced_job(
        GUARDED, propagation_policy="Background", grace_period_seconds=0
    )
    kube.core.delete_collection_namespaced_limit_range(GUARDED)
    kube.core.delete_collection_namespaced_secret(GUARDED)
    for service in kube.core.list_namespaced_service(GUARDED).items:
        # (the garbage collector may delete it first: the Secret just deleted owns it)
        gone = refusal(
            lambda name=service.metadata.name: kube.core.delete_namespaced_service(name, GUARDED)
        )
        assert gone is None or gone.status == 404, gone
    custom = client.CustomObjectsApi(kube.api)
    for plural in ("resourceclaims", "resourceclaimtemplates"):
        custom.delete_collection_namespaced_custom_object("resource.k8s.io", "v1", GUARDED, plural)
    kube.core.delete_collection_namespaced_pod(GUARDED, grace_period_seconds=0)


@pytest.fixture
def guarded(guard: Guard, as_gpuqueue: client.ApiClient) -> client.ApiClient:
    """The policy installed; a client of gpuqueue's ServiceAccount."""
    guard.install()
    return as_gpuqueue


def test_no_one_but_gpuqueue_creates_gpu_workloads_in_a_team_namespace(
    kube: Kube, guarded: client.ApiClient
) -> None:
    apps = client.AppsV1Api(kube.api)
    for call in (
        lambda: kube.core.create_namespaced_pod(GUARDED, pod("direct", 8)),
        lambda: apps.create_namespaced_deployment(GUARDED, deployment(8)),
        # Each name and prefix of the configured GPU resources.
        lambda: kube.core.create_namespaced_pod(
            GUARDED,
            {"metadata": {"name": "mig"}, "spec": {"containers": [gpu_container(1, MIG)]}},
        ),
        lambda: kube.core.create_namespaced_pod(
            GUARDED,
            {
                "metadata": {"name": "amd"},
                "spec": {"containers": [gpu_container(1, "amd.com/gpu")]},
            },
        ),
    ):
        refused_by_policy(call)
    # What asks for no GPUs is none of the queue's business; in an exempt namespace, neither is
    # a GPU.
    assert refusal(lambda: kube.core.create_namespaced_pod(GUARDED, pod("cpu-only", 0))) is None
    exempt = refusal(
        lambda: kube.core.create_namespaced_pod("kube-system", pod("exempt", 1), dry_run="All")
    )
    assert exempt is None, exempt.body


def test_every_namespace_but_the_exempt_ones_is_covered(kube: Kube, guard: Guard) -> None:
    """A namespace nobody labelled is under the policy, a new one too, and the controllers
    still fill a new namespace (its ServiceAccount, its CA ConfigMap) under it."""
    guard.install()
    refused_by_policy(lambda: kube.core.create_namespaced_pod("others", pod("unlabelled", 1)))
    fresh = "unlabelled-fresh"
    kube.core.create_namespace({"metadata": {"name": fresh}})
    try:
        kube.wait(
            lambda: (
                bool(kube.core.list_namespaced_service_account(fresh).items)
                and bool(kube.core.list_namespaced_config_map(fresh).items)
            )
        )
        refused_by_policy(
            lambda: kube.core.create_namespaced_pod(fresh, pod("fresh", 1), dry_run="All")
        )
    finally:
        kube.core.delete_namespace(fresh)


def test_impersonating_a_kube_system_controller_gets_no_gpus(kube: Kube, guard: Guard) -> None:
    """Whoever may impersonate ServiceAccounts cannot act as a controller of kube-system to get
    GPU pods: no controller is exempt, and the Job controller's pods pass only as gpuqueue's."""
    guard.install()
    for controller in ("replicaset-controller", "job-controller", "daemon-set-controller"):
        core = impersonating(kube, f"system:serviceaccount:kube-system:{controller}")
        refused_by_policy(lambda core=core: core.create_namespaced_pod(GUARDED, pod("as-it", 8)))
    # Not even with gpuqueue's labels, when no Job is the pod's controller.
    core = impersonating(kube, "system:serviceaccount:kube-system:job-controller")
    labelled = pod("as-gpuqueue-s", 8)
    labelled["metadata"]["labels"] = FORGED
    refused_by_policy(lambda: core.create_namespaced_pod(GUARDED, labelled))


def test_a_limit_range_gives_no_deployment_gpus(kube: Kube, guard: Guard) -> None:
    """A LimitRange that defaults a GPU limit, made before the policy, would have the
    ReplicaSet controller create GPU pods from a Deployment that asks for none: its pods are
    refused. And no such LimitRange is accepted once the policy is in place."""
    gpus_by_default = {
        "metadata": {"name": "gpus-by-default"},
        "spec": {"limits": [{"type": "Container", "default": {"nvidia.com/gpu": "1"}}]},
    }
    kube.core.create_namespaced_limit_range(GUARDED, gpus_by_default)
    guard.install()
    apps = client.AppsV1Api(kube.api)
    apps.create_namespaced_deployment(GUARDED, deployment(0, name="gpu-less"))

    def refused_or_running() -> bool:
        sets = apps.list_namespaced_replica_set(GUARDED).items
        failed = any(
            c.type == "ReplicaFailure" and QUEUE_MESSAGE in (c.message or "")
            for rs in sets
            for c in rs.status.conditions or []
        )
        return failed or bool(kube.pods(GUARDED, selector="app=x"))

    kube.wait(refused_or_running)
    assert kube.pods(GUARDED, selector="app=x") == []
    refused_by_policy(
        lambda: kube.core.create_namespaced_limit_range(
            GUARDED, {**gpus_by_default, "metadata": {"name": "again"}}
        ),
        says="may not give containers GPUs by default",
    )
    kube.core.create_namespaced_limit_range(  # one that gives CPU by default is fine
        GUARDED,
        {
            "metadata": {"name": "cpu-by-default"},
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "1"}}]},
        },
    )


def test_scaling_a_gpu_workload_made_before_the_policy_starts_no_gpu_pod(
    kube: Kube, guard: Guard
) -> None:
    """A Deployment and a StatefulSet with GPUs that predate the policy, scaled through their
    `scale` subresource: the new pods are refused (the Scale object carries no pod template,
    so the pods are where the policy sees the GPUs)."""
    apps = client.AppsV1Api(kube.api)
    apps.create_namespaced_deployment(GUARDED, deployment(1, name="old-deploy"))
    stateful = {
        "metadata": {"name": "old-sts"},
        "spec": {
            "replicas": 1,
            "serviceName": "old-sts",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "x", "set": "sts"}},
            "template": template({"containers": [gpu_container(1)]}, {"set": "sts"}),
        },
    }
    apps.create_namespaced_stateful_set(GUARDED, stateful)
    kube.wait(lambda: len(kube.pods(GUARDED, selector="app=x")) == 2)
    guard.install()
    apps.patch_namespaced_deployment_scale("old-deploy", GUARDED, {"spec": {"replicas": 3}})
    apps.patch_namespaced_stateful_set_scale("old-sts", GUARDED, {"spec": {"replicas": 3}})

    def refused_twice_or_scaled() -> bool:
        failures = [
            e
            for e in kube.core.list_namespaced_event(GUARDED).items
            if e.reason == "FailedCreate" and QUEUE_MESSAGE in (e.message or "")
        ]
        kinds = {e.involved_object.kind for e in failures}
        return {"ReplicaSet", "StatefulSet"} <= kinds or len(
            kube.pods(GUARDED, selector="app=x")
        ) > 2

    kube.wait(refused_twice_or_scaled)
    assert len(kube.pods(GUARDED, selector="app=x")) == 2


def test_devices_are_not_claimed_around_the_queue(kube: Kube, guard: Guard) -> None:
    """Dynamic Resource Allocation: a ResourceClaim, a ResourceClaimTemplate, and a pod or a
    workload template with `resourceClaims` are gpuqueue's alone."""
    guard.install()
    custom = client.CustomObjectsApi(kube.api)
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "mine"},
        "spec": {"devices": {"requests": [request]}},
    }
    claim_template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "mine"},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }
    for plural, body in (("resourceclaims", claim), ("resourceclaimtemplates", claim_template)):
        refused_by_policy(
            lambda plural=plural, body=body: custom.create_namespaced_custom_object(
                "resource.k8s.io", "v1", GUARDED, plural, body
            ),
            says="ResourceClaim",
        )
    claiming = {
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "mine"}],
        "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
    }
    refused_by_policy(
        lambda: kube.core.create_namespaced_pod(
            GUARDED, {"metadata": {"name": "claims"}, "spec": claiming}
        ),
        says="resourceClaims",
    )
    refused_by_policy(
        lambda: client.AppsV1Api(kube.api).create_namespaced_deployment(
            GUARDED,
            {
                "metadata": {"name": "claims"},
                "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template(claiming)},
            },
        ),
        says="resourceClaims",
    )


def test_a_network_device_is_not_a_gpu(kube: Kube, guard: Guard) -> None:
    """RDMA and host devices advertised under nvidia.com/ are not among the GPU resources."""
    guard.install()
    for name, resource in (
        ("rdma", "nvidia.com/rdma_shared_device_a"),
        ("hostdev", "nvidia.com/hostdev"),
    ):
        body = {"metadata": {"name": name}, "spec": {"containers": [gpu_container(1, resource)]}}
        refused = refusal(lambda body=body: kube.core.create_namespaced_pod(GUARDED, body))
        assert refused is None, refused.body


def test_no_pod_outside_the_queue_tolerates_the_gpu_taint(kube: Kube, guard: Guard) -> None:
    """A pod that asks for no GPU but tolerates the GPU nodes' taint lands there, where an
    image with NVIDIA_VISIBLE_DEVICES baked in gets the node's GPUs: refused, as are a
    toleration of every taint and a pod that names its node; other taints are tolerated."""
    guard.install()
    for name, toleration in (
        ("gpu-taint", {"key": "nvidia.com/gpu", "operator": "Exists"}),
        ("gpu-taint-equal", {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}),
        ("every-taint", {"operator": "Exists"}),
    ):
        refused_by_policy(
            lambda name=name, toleration=toleration: kube.core.create_namespaced_pod(
                GUARDED, pod(name, 0, tolerations=[toleration])
            ),
            says="taint",
        )
    refused_by_policy(
        lambda: client.AppsV1Api(kube.api).create_namespaced_deployment(
            GUARDED, deployment(0, tolerations=[{"operator": "Exists"}])
        ),
        says="taint",
    )
    # Naming the node skips the scheduler, and with it the taint.
    refused_by_policy(
        lambda: kube.core.create_namespaced_pod(GUARDED, pod("pinned", 0, nodeName="h100-3")),
        says="nodeName",
    )
    spot = [{"key": "gpuqueue.dev/spot", "operator": "Exists", "effect": "NoSchedule"}]
    assert (
        refusal(lambda: kube.core.create_namespaced_pod(GUARDED, pod("spot", 0, tolerations=spot)))
        is None
    )


def test_no_pod_outside_the_queue_selects_gpus_by_environment(kube: Kube, guard: Guard) -> None:
    """NVIDIA_VISIBLE_DEVICES and the MIG device variables, in a container's env, an init
    container's, through an envFrom prefix, or in a workload's template, and a CDI device
    annotation: refused."""
    guard.install()
    all_gpus = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    bodies = [
        {"containers": [{"name": "c", "image": "x", "env": all_gpus}]},
        {
            "initContainers": [
                {
                    "name": "i",
                    "image": "x",
                    "env": [{"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"}],
                }
            ],
            "containers": [{"name": "c", "image": "x"}],
        },
        {
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "envFrom": [{"prefix": "NVIDIA_", "configMapRef": {"name": "devices"}}],
                }
            ]
        },
    ]
    for i, spec in enumerate(bodies):
        refused_by_policy(
            lambda i=i, spec=spec: kube.core.create_namespaced_pod(
                GUARDED, {"metadata": {"name": f"env-{i}"}, "spec": spec}
            ),
            says="NVIDIA_",
        )
    refused_by_policy(
        lambda: kube.batch.create_namespaced_job(
            GUARDED,
            {
                "metadata": {"name": "env"},
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "x", "env": all_gpus}],
                        }
                    }
                },
            },
        ),
        says="NVIDIA_",
    )
    refused_by_policy(  # a CDI device request in the runtime's own terms
        lambda: kube.core.create_namespaced_pod(
            GUARDED,
            {
                "metadata": {
                    "name": "cdi",
                    "annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"},
                },
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        ),
        says="cdi.k8s.io",
    )
    other = [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]
    body = {
        "metadata": {"name": "env-ok"},
        "spec": {"containers": [{"name": "c", "image": "x", "env": other}]},
    }
    assert refusal(lambda: kube.core.create_namespaced_pod(GUARDED, body)) is None


def test_gpuqueue_s_labels_are_set_by_gpuqueue_alone(kube: Kube, guard: Guard) -> None:
    """Nobody else may make an object, or a pod template, that carries gpuqueue's labels or
    annotations: a GPU-less Job or pod labelled as some team's job, a Secret in the image of an
    attempt's token, a Deployment whose pods would be."""
    guard.install()
    says = "gpuqueue's own"
    refused_by_policy(
        lambda: kube.batch.create_namespaced_job(
            GUARDED,
            {
                "metadata": {"name": "gq-990003-1", "labels": FORGED},
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "x"}],
                        }
                    }
                },
            },
        ),
        says=says,
    )
    refused_by_policy(
        lambda: kube.core.create_namespaced_secret(
            GUARDED,
            {
                "metadata": {"name": "gq-990003-1-token", "labels": FORGED},
                "stringData": {"token": "t"},
            },
        ),
        says=says,
    )
    refused_by_policy(
        lambda: kube.core.create_namespaced_pod(
            GUARDED,
            {
                "metadata": {
                    "name": "annotated",
                    "annotations": {"gpuqueue.dev/checkpoint-requested": "2026-01-01T00:00:00Z"},
                },
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        ),
        says=says,
    )
    refused_by_policy(
        lambda: client.AppsV1Api(kube.api).create_namespaced_deployment(
            GUARDED,
            {
                "metadata": {"name": "labelled-pods"},
                "spec": {
                    "selector": {"matchLabels": {"app": "x"}},
                    "template": template({"containers": [{"name": "c", "image": "x"}]}, FORGED),
                },
            },
        ),
        says=says,
    )
    # The labels mean nothing elsewhere (an exempt namespace) and other labels are anyone's.
    unrelated = {"metadata": {"name": "mine", "labels": {"team": "a"}}, "stringData": {"k": "v"}}
    assert refusal(lambda: kube.core.create_namespaced_secret(GUARDED, unrelated)) is None


def test_gpuqueue_s_own_workloads_still_run(kube: Kube, guarded: client.ApiClient) -> None:
    """gpuqueue's Job is admitted and the Job controller creates its gang's pods (GPUs, the
    GPU taint tolerated, gpuqueue's labels); its objects stay as gpuqueue made them: a user may
    add a label of theirs, not change or remove gpuqueue's, nor their spec or data."""
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
    kube.wait(lambda: len(kube.pods(GUARDED, selector=f"{LABEL_JOB_ID}=990001")) == 2)
    (secret,) = kube.core.list_namespaced_secret(
        GUARDED, label_selector=f"{LABEL_JOB_ID}=990001"
    ).items
    name = secret.metadata.name
    ours = {"metadata": {"labels": {"owner": "alice"}}}
    assert refusal(lambda: kube.core.patch_namespaced_secret(name, GUARDED, ours)) is None
    for forged in ({LABEL_ATTEMPT: "2"}, {LABEL_JOB_ID: None}):
        refused_by_policy(
            lambda forged=forged: kube.core.patch_namespaced_secret(
                name, GUARDED, {"metadata": {"labels": forged}}
            ),
            says="gpuqueue's own",
        )
    # Nor may anyone else rewrite what gpuqueue made: the token, the rendezvous Service.
    refused_by_policy(
        lambda: kube.core.patch_namespaced_secret(
            name, GUARDED, {"stringData": {"token": "known-to-me"}}
        ),
        says="only gpuqueue changes",
    )
    (service,) = kube.core.list_namespaced_service(
        GUARDED, label_selector=f"{LABEL_JOB_ID}=990001"
    ).items
    refused_by_policy(
        lambda: kube.core.patch_namespaced_service(
            service.metadata.name, GUARDED, {"spec": {"selector": {"app": "mine"}}}
        ),
        says="only gpuqueue changes",
    )
    (job,) = kube.batch.list_namespaced_job(GUARDED, label_selector=f"{LABEL_JOB_ID}=990001").items
    refused_by_policy(  # more pods of gpuqueue's Job, by another hand
        lambda: kube.batch.patch_namespaced_job(
            job.metadata.name, GUARDED, {"spec": {"parallelism": 4}}
        )
    )
    # A debugging container in a gang's pod would share its node's devices.
    worker = kube.pods(GUARDED, selector=f"{LABEL_JOB_ID}=990001")[0]["metadata"]["name"]
    debug = {"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox"}]}}
    refused_by_policy(
        lambda: kube.core.patch_namespaced_pod_ephemeralcontainers(worker, GUARDED, debug)
    )


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
    except ApiException as exc:
        if exc.status != 409:
            raise
    accounts = yaml.safe_load_all((DEPLOY / "base" / "serviceaccount.yaml").read_text())
    for account in (doc["metadata"]["name"] for doc in accounts if doc):
        try:
            kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
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


def test_the_chart_renders_deploy_s_policies_from_its_values() -> None:
    """With its default values the chart's two policies are deploy/base's, word for word (the
    pods' and built-in workloads', the frameworks'); its values set the GPU resources, the GPU
    taint, the exempt namespaces and the operators' ServiceAccounts of both, and without the
    frameworks' policy the first trusts no operator."""
    try:
        helm_binary()
    except Unavailable as exc:
        pytest.skip(f"no helm: {exc}")
    suffixes = {
        POLICY: "-gpus-through-the-queue",
        FRAMEWORKS_POLICY: "-frameworks-through-the-queue",
    }

    def policies(*sets: str) -> dict[str, dict[str, dict[str, Any]]]:
        """kind -> which policy (by its name's end) -> spec."""
        found: dict[str, dict[str, dict[str, Any]]] = {}
        for obj in render(*sets):
            if "AdmissionPolicy" in obj["kind"]:
                (which,) = [s for s in suffixes.values() if obj["metadata"]["name"].endswith(s)]
                found.setdefault(obj["kind"], {})[which] = obj["spec"]
        return found

    def variables(spec: dict[str, Any]) -> dict[str, str]:
        return {v["name"]: v["expression"] for v in spec["variables"]}

    found = policies()
    for path, suffix in suffixes.items():
        base = {d["kind"]: d for d in yaml.safe_load_all(path.read_text()) if d}
        assert (
            found["ValidatingAdmissionPolicy"][suffix] == base["ValidatingAdmissionPolicy"]["spec"]
        )
        binding = found["ValidatingAdmissionPolicyBinding"][suffix]
        assert binding["policyName"] == f"gpuqueue-gpuqueue{suffix}"
        assert {**binding, "policyName": ""} == {
            **base["ValidatingAdmissionPolicyBinding"]["spec"],
            "policyName": "",
        }
    found = policies(
        "admissionPolicy.gpuResources={amd.com/gpu}",
        "admissionPolicy.exemptNamespaces={kube-system,monitoring}",
        "config.gpuTaint=example.com/gpu",
        "admissionPolicy.trainingOperators={system:serviceaccount:ml:training-operator}",
        "admissionPolicy.rayOperators={system:serviceaccount:ray:kuberay,system:serviceaccount:ray:b}",
    )
    for suffix in suffixes.values():
        spec = found["ValidatingAdmissionPolicy"][suffix]
        assert variables(spec)["gpuResources"] == '["amd.com/gpu"]', suffix
        assert variables(spec)["gpuTaints"] == '["example.com/gpu"]', suffix
        assert variables(spec)["trainingOperators"] == (
            "['system:serviceaccount:ml:training-operator']"
        ), suffix
        assert variables(spec)["rayOperators"] == (
            "['system:serviceaccount:ray:kuberay', 'system:serviceaccount:ray:b']"
        ), suffix
        binding = found["ValidatingAdmissionPolicyBinding"][suffix]
        (exempt,) = binding["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert exempt["values"] == ["gpuqueue", "kube-system", "monitoring"], suffix
    # Without the frameworks' policy nothing keeps gpuqueue's labels out of an operator's
    # templates: the first policy then lets no operator's pod carry them.
    found = policies("admissionPolicy.frameworks=false")
    assert list(found["ValidatingAdmissionPolicy"]) == [suffixes[POLICY]]
    assert list(found["ValidatingAdmissionPolicyBinding"]) == [suffixes[POLICY]]
    first = variables(found["ValidatingAdmissionPolicy"][suffixes[POLICY]])
    assert first["trainingOperators"] == first["rayOperators"] == "[]"
    assert policies("admissionPolicy.enabled=false") == {}
    # An operator's name goes into a CEL expression: only a ServiceAccount's is rendered.
    for bad in ("kuberay-operator", "system:serviceaccount:ray:x'] || true || ['"):
        refused = helm(
            "template",
            "gpuqueue",
            str(CHART),
            "--kube-version",
            NEWEST_KUBERNETES,
            "--set-json",
            f"admissionPolicy.rayOperators={json.dumps([bad])}",
            check=False,
        )
        assert refused.returncode != 0, bad
        assert "is not a ServiceAccount's user name" in refused.stderr, refused.stderr
