"""The Helm chart (deploy/helm/gpuqueue) as a platform team installs it: it renders and lints,
every pod passes Pod Security "restricted" with a read-only root filesystem, it never creates
the Secret it reads, its RBAC is deploy/'s least privilege, and the real API server accepts
every object (server-side dry run) and grants its ServiceAccount exactly what gpuqueue calls."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from tests.kube import openapi
from tests.kube.conftest import DEPLOY, Kube
from tests.kube.controlplane import KUBE_VERSION, Unavailable
from tests.kube.helm import (
    CHART,
    MINIMUM_KUBERNETES,
    NEWEST_KUBERNETES,
    helm,
    helm_binary,
    render,
)

TEAMS = "teamNamespaces={team-a,team-b}"


@pytest.fixture(scope="module", autouse=True)
def _helm() -> None:
    try:
        helm_binary()
    except Unavailable as exc:
        pytest.skip(f"no helm: {exc}")


def kinds(objects: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj["metadata"]["name"])
    return out


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        obj["metadata"]["name"]: obj["spec"]["template"]["spec"]
        for obj in objects
        if obj["kind"] in ("Deployment", "Job")
    }


def test_the_chart_lints_and_renders_every_part() -> None:
    helm("lint", "--strict", str(CHART), "--set", TEAMS)
    found = kinds(render(TEAMS))
    assert sorted(found["Deployment"]) == [
        "gpuqueue-beat",
        "gpuqueue-watcher",
        "gpuqueue-web",
        "gpuqueue-worker",
    ]
    assert found["Job"] == ["gpuqueue-migrate"]
    assert len(found["RoleBinding"]) == 2 and len(found["PodDisruptionBudget"]) == 2
    assert len(found["NetworkPolicy"]) == 2
    assert found["ValidatingAdmissionPolicy"] and found["ValidatingAdmissionPolicyBinding"]
    assert "Secret" not in found  # never overwrites the real one
    assert "ServiceMonitor" not in found
    assert "ServiceMonitor" in kinds(render(TEAMS, "metrics.serviceMonitor.enabled=true"))


def test_the_chart_installs_on_kubernetes_1_30_and_later_only() -> None:
    """The minimum the chart declares is the oldest it renders for; the newest is the version
    of the control plane the last test applies it to."""
    assert NEWEST_KUBERNETES == KUBE_VERSION
    assert kinds(render(TEAMS, kube_version=MINIMUM_KUBERNETES)) == kinds(render(TEAMS))
    older = helm("template", "x", str(CHART), "--kube-version", "v1.29.9", check=False)
    assert older.returncode != 0 and "kubeVersion: >=1.30.0-0" in older.stderr


@pytest.mark.parametrize("version", [MINIMUM_KUBERNETES, NEWEST_KUBERNETES])
def test_every_object_is_valid_for_the_oldest_and_newest_kubernetes(version: str) -> None:
    """Strictly, against Kubernetes' own OpenAPI schemas of that release (no field it does not
    declare); the newest is also applied to a real API server below."""
    try:
        objects = render(TEAMS, kube_version=version)
        found = {
            f"{o['kind']}/{o['metadata']['name']}": openapi.errors(o, version) for o in objects
        }
    except Unavailable as exc:
        pytest.skip(str(exc))
    assert {name: problems for name, problems in found.items() if problems} == {}
    # The check does judge: a misspelt field and a wrong type are errors.
    (web,) = [o for o in objects if o["kind"] == "Deployment" and "web" in o["metadata"]["name"]]
    wrong = {**web, "spec": {**web["spec"], "replicaz": 2, "replicas": "two"}}
    problems = " ".join(openapi.errors(wrong, version))
    assert "replicaz" in problems and "'two' is not of type 'integer'" in problems


def test_the_migration_is_a_hook_run_once_before_install_and_upgrade() -> None:
    (job,) = [o for o in render() if o["kind"] == "Job"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == [
        "migrate",
        "--noinput",
    ]
    for name, spec in pod_specs(render()).items():
        if name != "gpuqueue-migrate":
            assert spec["initContainers"][0]["name"] == "wait-for-schema", name


def test_every_pod_is_restricted_with_a_read_only_root_filesystem() -> None:
    specs = pod_specs(render(TEAMS))
    assert len(specs) == 5
    for name, spec in specs.items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], name
        token = spec.get("automountServiceAccountToken")
        assert token is (name in ("gpuqueue-worker", "gpuqueue-watcher")), name


def test_the_secret_is_only_referred_to_and_metrics_need_its_token() -> None:
    objects = render(TEAMS, "existingSecret=from-vault", "metrics.serviceMonitor.enabled=true")
    for name, spec in pod_specs(objects).items():
        for container in spec["containers"]:
            refs = [e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e]
            assert refs == ["from-vault"], name
    (config,) = [
        o for o in objects if o["kind"] == "ConfigMap" and "config" in o["metadata"]["name"]
    ]
    assert "GPUQUEUE_METRICS_OPEN" not in config["data"]
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    credentials = monitor["spec"]["endpoints"][0]["authorization"]["credentials"]
    assert credentials == {"name": "from-vault", "key": "GPUQUEUE_METRICS_TOKEN"}


def test_the_charts_rbac_is_deploys_least_privilege() -> None:
    base = {
        doc["metadata"]["name"]: doc["rules"]
        for doc in yaml.safe_load_all((DEPLOY / "base" / "rbac.yaml").read_text())
        if doc and doc["kind"] == "ClusterRole"
    }
    chart = {o["metadata"]["name"]: o["rules"] for o in render(TEAMS) if o["kind"] == "ClusterRole"}
    assert chart == base  # release "gpuqueue": the same names, the same rules
    bindings = [o for o in render(TEAMS) if o["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]


def test_the_charts_processes_run_what_deploys_run() -> None:
    """Each container of the chart (init containers included) has the command and probes of
    its counterpart in deploy/base, so that the two ways to install run the same service."""

    def containers(objects: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
        out = {}
        for obj in objects:
            if obj["kind"] not in ("Deployment", "Job"):
                continue
            name = obj["metadata"]["name"].removeprefix(prefix)
            spec = obj["spec"]["template"]["spec"]
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                probes = {k: c.get(k) for k in ("readinessProbe", "livenessProbe", "startupProbe")}
                out[f"{name}/{c['name']}"] = (c["command"], probes)
        return out

    base = [
        doc
        for path in sorted((DEPLOY / "base").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    ours = containers(render(TEAMS), "gpuqueue-")
    assert ours == containers(base, "gpuqueue-")
    assert len(ours) == 9  # web, worker, beat, watcher, each with its wait, and the migration


NAMESPACE = "gpuqueue-helm"


def test_the_real_api_server_accepts_every_object_and_grants_only_what_gpuqueue_calls(
    kube: Kube,
) -> None:
    try:
        kube.core.create_namespace(
            {
                "metadata": {
                    "name": NAMESPACE,
                    "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
                }
            }
        )
    except ApiException as exc:
        if exc.status != 409:
            raise
    objects = render(TEAMS, namespace=NAMESPACE, release="helmtest")
    dynamic = DynamicClient(kube.api)

    def apply(obj: dict[str, Any]) -> None:
        """A server-side apply, dry run, with strict field validation: the API server's schema
        of this version (an unknown or misplaced field is an error, not a warning), its
        validation and its admission, Pod Security included."""
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        dynamic.server_side_apply(
            resource,
            body=obj,
            namespace=obj["metadata"].get("namespace") or NAMESPACE,
            query_params=[
                ("dryRun", "All"),
                ("fieldManager", "helm-test"),
                ("fieldValidation", "Strict"),
            ],
        )

    for obj in objects:
        apply(obj)
    # Strict does judge: a misspelt field of the web Deployment is refused.
    (web,) = [
        o for o in objects if o["metadata"]["name"] == "helmtest-web" and o["kind"] == "Deployment"
    ]
    with pytest.raises(ApiException) as unknown:
        apply({**web, "spec": {**web["spec"], "replicaz": 2}})
    # (server-side apply answers it with 500 "failed to create typed patch object")
    assert ".spec.replicaz: field not declared in schema" in str(unknown.value.body)
    # The bare pod a restricted namespace refuses: the check above does judge.
    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_pod(
            NAMESPACE,
            {"metadata": {"name": "bare"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
            dry_run="All",
        )
    assert "violates PodSecurity" in str(refused.value.body)
    # RBAC for real, then asked of the API server as the chart's ServiceAccount.
    for obj in objects:
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding", "RoleBinding"):
            try:
                utils.create_from_dict(kube.api, obj, namespace=obj["metadata"].get("namespace"))
            except utils.FailToCreateError as failure:
                assert failure.api_exceptions[0].status == 409
    user = f"system:serviceaccount:{NAMESPACE}:helmtest"
    authorization = client.AuthorizationV1Api(kube.api)

    def may(
        verb: str,
        resource: str,
        namespace: str | None = None,
        group: str = "",
        sub: str | None = None,
    ) -> bool:
        review = {
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
                "resourceAttributes": {
                    "verb": verb,
                    "resource": resource,
                    "group": group,
                    "namespace": namespace,
                    "subresource": sub,
                },
            }
        }
        return bool(authorization.create_subject_access_review(review).status.allowed)

    # Every call the backend makes ...
    assert may("list", "nodes") and may("watch", "pods")
    assert may("create", "jobs", "team-a", "batch") and may("delete", "jobs", "team-b", "batch")
    assert may("create", "secrets", "team-a") and may("get", "secrets", "team-a")
    assert may("patch", "pods", "team-a") and may("get", "pods", "team-a", sub="log")
    assert may("list", "events", "team-a") and may("create", "services", "team-a")
    # ... and nothing more: no team namespace not named, no writes cluster-wide, no reads of
    # Secrets it did not make elsewhere.
    assert not may("create", "jobs", "default", "batch")
    assert not may("get", "secrets", "default") and not may("get", "secrets", NAMESPACE)
    assert not may("delete", "nodes") and not may("patch", "nodes")
    assert not may("create", "pods", "team-a") and not may("list", "secrets", "team-a")
