"""deploy/: the manifests parse and pass the client's models, every process has probes and
requests, the RBAC grants exactly what the backend needs, and the Grafana dashboard only
charts metrics gpuqueue exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MODELS = {
    "Deployment": client.V1Deployment,
    "Service": client.V1Service,
    "ServiceAccount": client.V1ServiceAccount,
    "ConfigMap": client.V1ConfigMap,
    "Secret": client.V1Secret,
    "Namespace": client.V1Namespace,
    "ClusterRole": client.V1ClusterRole,
    "ClusterRoleBinding": client.V1ClusterRoleBinding,
    "RoleBinding": client.V1RoleBinding,
    "Role": client.V1Role,
    "ValidatingAdmissionPolicy": client.V1ValidatingAdmissionPolicy,
    "ValidatingAdmissionPolicyBinding": client.V1ValidatingAdmissionPolicyBinding,
    "PodDisruptionBudget": client.V1PodDisruptionBudget,
    "NetworkPolicy": client.V1NetworkPolicy,
    "Job": client.V1Job,
    "PriorityClass": client.V1PriorityClass,
}


def kustomize_files(pattern: str) -> list[Path]:
    """deploy/'s kustomize manifests (the Helm chart's templates are tested from its render:
    tests/kube/test_helm_chart.py)."""
    return sorted(p for p in DEPLOY.rglob(pattern) if "helm" not in p.relative_to(DEPLOY).parts)


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in kustomize_files("*.yaml"):
        if path.name == "kustomization.yaml":
            continue
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents() if d["kind"] == kind]


def test_every_manifest_is_a_valid_object_of_its_kind() -> None:
    docs = documents()
    assert docs
    for doc in docs:
        model = MODELS[doc["kind"]].from_dict(doc)
        assert client.ApiClient().sanitize_for_serialization(model) == doc, doc["metadata"]["name"]


def test_no_kustomization_applies_a_secret() -> None:
    """`kubectl apply -k` must never overwrite the real gpuqueue-secrets with placeholders."""
    for path in DEPLOY.rglob("kustomization.yaml"):
        for resource in yaml.safe_load(path.read_text()).get("resources", []):
            target = path.parent / resource
            if target.is_file():
                kinds = {d["kind"] for d in yaml.safe_load_all(target.read_text()) if d}
                assert "Secret" not in kinds, target


def test_every_kustomization_names_files_that_exist() -> None:
    for path in DEPLOY.rglob("kustomization.yaml"):
        spec = yaml.safe_load(path.read_text())
        for resource in spec.get("resources", []):
            assert (path.parent / resource).exists(), f"{path}: {resource}"
        for generator in spec.get("configMapGenerator", []):
            for item in generator.get("files", []):
                assert (path.parent / item.split("=")[-1]).exists()


def test_web_worker_beat_and_watcher_run_with_probes_and_resource_requests() -> None:
    deployments = {d["metadata"]["name"]: d for d in of_kind("Deployment")}
    assert set(deployments) == {
        "gpuqueue-web",
        "gpuqueue-worker",
        "gpuqueue-beat",
        "gpuqueue-watcher",
    }
    for name, deployment in deployments.items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert (
            container["resources"]["requests"]["cpu"]
            and container["resources"]["requests"]["memory"]
        )
        assert {"livenessProbe", "readinessProbe", "startupProbe"} & set(container), name
        refs = {next(iter(ref)) for ref in container["envFrom"]}
        assert refs == {"configMapRef", "secretRef"}, name
    watcher = deployments["gpuqueue-watcher"]["spec"]["template"]["spec"]["containers"][0]
    assert watcher["command"] == [
        "python",
        "manage.py",
        "watch_cluster",
        "--lease-namespace",
        "$(POD_NAMESPACE)",
        "--lease-name",
        "gpuqueue-watcher",
    ]


def test_the_schema_is_migrated_once_by_a_job_and_every_process_waits_for_it() -> None:
    (job,) = of_kind("Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
    for deployment in of_kind("Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        (wait,) = spec["initContainers"]
        assert "migrate --check" in " ".join(wait["command"]), deployment["metadata"]["name"]
        assert all("migrate" not in " ".join(c["command"]) for c in spec["containers"])


def rules_of(kind: str, name: str) -> list[dict[str, Any]]:
    (role,) = [d for d in of_kind(kind) if d["metadata"]["name"] == name]
    return role["rules"]


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_reads_nodes_and_pods_cluster_wide_and_nothing_more() -> None:
    """Nodes and pods, and DRA's devices, classes and claims (listed only)."""
    assert grants(rules_of("ClusterRole", "gpuqueue-cluster-reader")) == {
        ("", resource, verb) for resource in ("nodes", "pods") for verb in ("get", "list", "watch")
    } | {
        ("resource.k8s.io", resource, "list")
        for resource in ("resourceslices", "deviceclasses", "resourceclaims")
    }


def test_rbac_writes_only_what_the_backend_needs_in_team_namespaces() -> None:
    assert grants(rules_of("ClusterRole", "gpuqueue-team-workloads")) == {
        ("batch", "jobs", "create"),
        ("batch", "jobs", "delete"),
        ("batch", "jobs", "get"),
        ("batch", "jobs", "list"),
        ("batch", "jobs", "watch"),
        # The users' own labelled Jobs: admitted, suspended and described by a patch; a
        # preempted one's start time cleared (gpuqueue/cluster/sources.py).
        ("batch", "jobs", "patch"),
        ("batch", "jobs/status", "patch"),
        # The users' own labelled PyTorchJobs and RayJobs (gpuqueue/cluster/frameworks.py):
        # listed and watched, read, admitted, suspended and described by a patch, deleted once
        # cancelled.
        *(
            (group, resource, verb)
            for group, resource in (("kubeflow.org", "pytorchjobs"), ("ray.io", "rayjobs"))
            for verb in ("get", "list", "watch", "patch", "delete")
        ),
        ("", "events", "create"),
        ("", "services", "create"),
        ("", "services", "delete"),
        ("", "services", "get"),  # a relaunch adopts, and a stop deletes, only its own
        ("", "configmaps", "create"),  # the marker naming the install that owns the namespace
        ("", "configmaps", "get"),
        ("", "secrets", "create"),
        ("", "secrets", "delete"),
        ("", "secrets", "get"),
        # A gang's PodDisruptionBudget (GPUQUEUE_K8S_GANG_PDB): made and adopted; it goes with
        # the attempt's Secret that owns it.
        ("policy", "poddisruptionbudgets", "create"),
        ("policy", "poddisruptionbudgets", "get"),
        # A DRA flavor's claim template and a gang's PodGroup (Kubernetes 1.37): made, adopted
        # (the template deleted) only with the attempt's proof; they go with its Secret.
        ("resource.k8s.io", "resourceclaimtemplates", "create"),
        ("resource.k8s.io", "resourceclaimtemplates", "delete"),
        ("resource.k8s.io", "resourceclaimtemplates", "get"),
        # The claim the sharers of a shared DRA GPU share: made, joined and left (update of
        # its owners), listed by a stop, deleted by its last sharer, only with its proof.
        ("resource.k8s.io", "resourceclaims", "create"),
        ("resource.k8s.io", "resourceclaims", "delete"),
        ("resource.k8s.io", "resourceclaims", "get"),
        ("resource.k8s.io", "resourceclaims", "list"),
        ("resource.k8s.io", "resourceclaims", "update"),
        ("scheduling.k8s.io", "podgroups", "create"),
        ("scheduling.k8s.io", "podgroups", "get"),
        ("", "pods", "patch"),
        ("", "pods/log", "get"),
        ("", "events", "list"),
    }


def test_no_wildcards_and_no_cluster_wide_write() -> None:
    write = {
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
        "escalate",
        "bind",
        "impersonate",
    }
    for role in of_kind("ClusterRole") + of_kind("Role"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], role["metadata"]["name"]
            assert "resourceNames" not in rule or rule["resourceNames"]
    writers = {
        r["metadata"]["name"]
        for r in of_kind("ClusterRole")
        if any(write & set(rule["verbs"]) for rule in r["rules"])
    }
    for binding in of_kind("ClusterRoleBinding"):
        assert binding["roleRef"]["name"] not in writers, "a writing role bound cluster-wide"
    for binding in of_kind("RoleBinding"):
        if binding["roleRef"]["kind"] == "Role":
            # The leader election's Leases, in gpuqueue's own namespace (kustomize's namespace).
            assert "namespace" not in binding["metadata"]
            assert binding["roleRef"]["name"] == "gpuqueue-leader-election"
            continue
        assert binding["metadata"]["namespace"].startswith("team-")
        assert binding["roleRef"]["name"] in ("gpuqueue-team-workloads", "gpuqueue-team-logs")


def test_only_the_processes_that_call_kubernetes_get_a_token() -> None:
    for deployment in of_kind("Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        calls_api = deployment["metadata"]["name"] in (
            "gpuqueue-worker",
            "gpuqueue-watcher",
            "gpuqueue-beat",  # its Lease
            "gpuqueue-web",  # workers' logs, with its own ServiceAccount
        )
        assert spec.get("automountServiceAccountToken", True) is calls_api


@pytest.mark.parametrize("path", kustomize_files("*.json"), ids=lambda p: p.name)
def test_the_grafana_dashboard_charts_only_metrics_gpuqueue_exports(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    exported = (ROOT / "gpuqueue" / "ops" / "metrics.py").read_text()
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    names = {
        re.sub(r"_(total|bucket)$", "", n) for e in exprs for n in re.findall(r"gpuqueue_\w+", e)
    }
    assert names
    for name in names:
        assert f'"{name}"' in exported, name


def test_two_of_everything_spread_over_nodes_and_watcher_and_beat_elect_a_leader() -> None:
    deployments = {d["metadata"]["name"]: d for d in of_kind("Deployment")}
    for name, deployment in deployments.items():
        assert deployment["spec"]["replicas"] == 2, name
        assert "strategy" not in deployment["spec"], name  # rolls: a stopping leader releases
        spec = deployment["spec"]["template"]["spec"]
        (term,) = spec["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname", name
        selector = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        assert selector == deployment["spec"]["selector"]["matchLabels"], name
    for name in ("gpuqueue-watcher", "gpuqueue-beat"):
        (container,) = deployments[name]["spec"]["template"]["spec"]["containers"]
        at = container["command"].index("--lease-namespace")
        assert container["command"][at + 1 : at + 4] == ["$(POD_NAMESPACE)", "--lease-name", name]
        namespace = {"fieldRef": {"fieldPath": "metadata.namespace"}}
        assert {"name": "POD_NAMESPACE", "valueFrom": namespace} in container["env"], name
    budgets = {
        b["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]: b
        for b in of_kind("PodDisruptionBudget")
    }
    assert set(budgets) == {"web", "worker", "watcher", "beat"}
    assert all(b["spec"] == {**b["spec"], "maxUnavailable": 1} for b in budgets.values())
    assert not any("minAvailable" in b["spec"] for b in budgets.values())


def test_workers_get_a_priority_class_that_kube_scheduler_s_preemption_spares() -> None:
    (priority,) = of_kind("PriorityClass")
    assert priority["metadata"]["name"] == "gpuqueue-workload"
    assert priority["preemptionPolicy"] == "Never" and not priority["globalDefault"]
    assert 1000000 <= priority["value"] < 2000000000  # below system-cluster-critical
    (config,) = [d for d in of_kind("ConfigMap") if d["metadata"]["name"] == "gpuqueue-config"]
    assert config["data"]["GPUQUEUE_K8S_PRIORITY_CLASS"] == "gpuqueue-workload"
