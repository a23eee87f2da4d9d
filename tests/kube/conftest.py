"""Fixtures for the tests on a real control plane (tests/kube/controlplane.py): one per test
session, with kwok GPU nodes, and a gpuqueue KubernetesBackend talking to it through the official
client. Each test starts from empty team namespaces and healthy nodes.

Without Go (and no cached build) these tests skip, and the session says why in one line.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.k8s_calls import Caller
from gpuqueue.cluster.kubernetes import KubernetesBackend
from gpuqueue.cluster.manifests import SELECTOR, ClusterOptions
from gpuqueue.cycle.cluster_sync import sync_cluster
from tests.kube.controlplane import (
    ControlPlane,
    Unavailable,
    api_client_for,
    build,
    create_nodes,
    fake_node,
    go_binary,
    missing_binaries,
    wait_nodes_ready,
)

NAMESPACES = ("team-a", "team-b", "others")
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
L4 = {"nvidia.com/gpu.product": "NVIDIA-L4"}
SPOT = {**H100, "gpuqueue.dev/capacity": "spot"}
SPOT_TAINT = {"key": "gpuqueue.dev/spot", "value": "true", "effect": "NoSchedule"}
# A node whose one GPU the device plugin shares by time-slicing, 4 replicas of it advertised as
# nvidia.com/gpu.shared (the GPU Operator's renamed resource); no flavor above selects it.
SHARED = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.sharing-strategy": "time-slicing",
}
# The test cluster: 4 × 8 H100, 2 × 4 L4, one H100 node tainted for spot capacity, and one A100
# shared four ways.
NODES = [
    *(fake_node(f"h100-{i}", {"nvidia.com/gpu": 8}, labels=H100) for i in range(4)),
    *(fake_node(f"l4-{i}", {"nvidia.com/gpu": 4}, labels=L4) for i in range(2)),
    fake_node("h100-spot-0", {"nvidia.com/gpu": 8}, labels=SPOT, taints=[SPOT_TAINT]),
    fake_node("a100-shared-0", {"nvidia.com/gpu.shared": 4}, labels=SHARED),
]
_skip_reason: list[str] = []


def pytest_report_header(config: pytest.Config) -> str | None:
    if go_binary() is None and missing_binaries():
        return "kube: Go is not installed and no control plane is cached: tests/kube skip"
    return None


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if go_binary() is None and missing_binaries():
        pytest.skip("no real control plane: Go is not installed (needed once to build it)")
    plane = ControlPlane(tmp_path_factory.mktemp("kube"), build())
    try:
        plane.start()
        api = api_client_for(plane.kubeconfig)
        create_nodes(api, NODES)
        wait_nodes_ready(api, [n["metadata"]["name"] for n in NODES])
        core = client.CoreV1Api(api)
        for namespace in NAMESPACES:
            core.create_namespace({"metadata": {"name": namespace}})
        _wait_default_service_accounts(core)
        yield plane
    except Unavailable as exc:
        pytest.fail(f"the control plane did not start: {exc}")
    finally:
        plane.stop()


def _wait_default_service_accounts(core: client.CoreV1Api) -> None:
    """Pods are refused until the controller-manager made each namespace's `default` account."""
    for namespace in NAMESPACES:
        for _ in range(300):
            try:
                core.read_namespaced_service_account("default", namespace)
                break
            except ApiException:
                time.sleep(0.1)


class Kube:
    """The test's view of the cluster: the API, gpuqueue's backend, and ways to wait."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.api = api_client_for(plane.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.backend = self.new_backend()

    def new_backend(self, **kwargs: Any) -> KubernetesBackend:
        """A backend as gpuqueue's processes make one, with short retries."""
        kwargs.setdefault("node_lost_grace_seconds", 300)
        return KubernetesBackend(
            api_client_for(self.plane.kubeconfig),
            options=ClusterOptions(public_url="http://gpuqueue.test"),
            caller=Caller(attempts=3, backoff_seconds=0.1),
            namespaces=lambda: ["team-a", "team-b"],
            **kwargs,
        )

    def json(self, response: Any) -> Any:
        return json.loads(response.data)

    def pods(self, namespace: str = "team-a", selector: str = SELECTOR) -> list[dict[str, Any]]:
        return self.json(
            self.core.list_namespaced_pod(
                namespace, label_selector=selector, _preload_content=False
            )
        )["items"]

    def jobs(self, namespace: str = "team-a") -> list[dict[str, Any]]:
        return self.json(
            self.batch.list_namespaced_job(
                namespace, label_selector=SELECTOR, _preload_content=False
            )
        )["items"]

    def sync_until(
        self,
        done: Callable[[], bool],
        timeout: float = 30.0,
        backend: KubernetesBackend | None = None,
    ) -> None:
        """Run gpuqueue's cluster sync, as the watcher does, until `done()`."""
        deadline = time.monotonic() + timeout
        while True:
            sync_cluster(backend or self.backend)
            if done():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"not done within {timeout:.0f} s")
            time.sleep(0.2)

    def external_pod(
        self, name: str, node: str, gpus: int, namespace: str = "others"
    ) -> dict[str, Any]:
        """A pod gpuqueue did not create, holding GPUs on `node` (bound by kube-scheduler)."""
        body = {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
        }
        return self.json(self.core.create_namespaced_pod(namespace, body, _preload_content=False))

    def wait(self, done: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"not done within {timeout:.0f} s")
            time.sleep(0.2)

    def set_ready(self, node: str, ready: bool, since: str) -> None:
        """Report the node's Ready condition as a kubelet would (kwok leaves it as set)."""
        status = "True" if ready else "False"
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": status,
                        "reason": "KubeletReady" if ready else "KubeletNotReady",
                        "message": "test",
                        "lastHeartbeatTime": since,
                        "lastTransitionTime": since,
                    }
                ]
            }
        }
        self.core.patch_node_status(node, patch)

    def reset(self) -> None:
        """Empty every namespace of pods, Jobs, Services, Secrets and quotas; nodes healthy."""
        for namespace in NAMESPACES:
            self.batch.delete_collection_namespaced_job(
                namespace, propagation_policy="Background", grace_period_seconds=0
            )
            self.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            self.core.delete_collection_namespaced_resource_quota(namespace)
            for service in self.core.list_namespaced_service(namespace).items:
                self.core.delete_namespaced_service(service.metadata.name, namespace)
            self.core.delete_collection_namespaced_secret(namespace, label_selector=SELECTOR)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for node in NODES:
            name = node["metadata"]["name"]
            current = self.core.read_node(name)
            if not any(c.type == "Ready" and c.status == "True" for c in current.status.conditions):
                self.set_ready(name, True, now)
        self.wait(lambda: all(not self.pods(ns, selector="") for ns in NAMESPACES), timeout=60)
        # A node that was not ready carries the node controller's not-ready taints until the
        # controller's next pass (up to 5 s); a test that started before would find it tainted.
        self.wait(self._nodes_as_created, timeout=60)

    def _nodes_as_created(self) -> bool:
        for node in NODES:
            taints = self.core.read_node(node["metadata"]["name"]).spec.taints or []
            if {t.key for t in taints} != {t["key"] for t in node["spec"]["taints"]}:
                return False
        return True


@pytest.fixture
def kube(control_plane: ControlPlane, world: Any) -> Iterator[Kube]:
    k = Kube(control_plane)
    k.reset()
    k.sync_until(lambda: True)  # the inventory, as the watcher's first pass takes it
    yield k
    k.reset()


DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def apply(api: client.ApiClient, path: Path, namespace: str = "gpuqueue") -> None:
    """Create what the file holds (ServiceAccount, ClusterRole, bindings), as kubectl would."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    create = {
        "ServiceAccount": lambda d: core.create_namespaced_service_account(namespace, d),
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
        "Role": lambda d: rbac.create_namespaced_role(d["metadata"].get("namespace", namespace), d),
        "RoleBinding": lambda d: rbac.create_namespaced_role_binding(
            d["metadata"].get("namespace", namespace), d
        ),
    }
    for doc in yaml.safe_load_all(path.read_text()):
        if doc:
            try:
                create[doc["kind"]](doc)
            except ApiException as exc:
                if exc.status != 409:
                    raise


@pytest.fixture
def as_gpuqueue(kube: Kube) -> client.ApiClient:
    """A client holding a token of the `gpuqueue` ServiceAccount, bound as deploy/ binds it."""
    try:
        kube.core.create_namespace({"metadata": {"name": "gpuqueue"}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    apply(kube.api, DEPLOY / "base" / "serviceaccount.yaml")
    apply(kube.api, DEPLOY / "base" / "rbac.yaml")
    apply(kube.api, DEPLOY / "overlays" / "example" / "team-rolebindings.yaml")
    token = kube.core.create_namespaced_service_account_token(
        "gpuqueue", "gpuqueue", {"spec": {"expirationSeconds": 3600}}
    ).status.token
    admin = kube.api.configuration
    configuration = client.Configuration()
    configuration.host = admin.host
    configuration.ssl_ca_cert = admin.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    configuration.retries = 0
    return client.ApiClient(configuration)


def acknowledge(job_id: int, token: str, location: str) -> dict[str, Any]:
    """What a workload does once it has saved a checkpoint, with its attempt's token
    (gpuqueue.client.workload.acknowledge, or register while it runs): gpuqueue's answer."""
    response = Client().post(
        f"/api/v1/jobs/{job_id}/checkpointed/",
        {"location": location},
        content_type="application/json",
        headers={"authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200, response.content
    answer: dict[str, Any] = response.json()
    return answer
