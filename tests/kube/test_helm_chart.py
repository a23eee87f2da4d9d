"""The Helm chart (deploy/helm/gpuqueue) as a platform team installs it: it renders and lints,
every pod passes Pod Security "restricted" with a read-only root filesystem, it never creates
the Secret it reads, its RBAC is deploy/'s least privilege, and the real API server accepts
every object (server-side dry run) and grants its ServiceAccount exactly what gpuqueue calls."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
import yaml
from django.test import Client
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
    # Two per team namespace (gpuqueue's, the web's logs), the leader election's.
    assert len(found["RoleBinding"]) == 5 and found["Role"] == ["gpuqueue-leader-election"]
    assert len(found["PodDisruptionBudget"]) == 4
    assert len(found["NetworkPolicy"]) == 2
    # GPUs through the queue: pods and the built-in workloads; PyTorchJobs, RayJobs, RayClusters.
    policies = [
        "gpuqueue-gpuqueue-frameworks-through-the-queue",
        "gpuqueue-gpuqueue-gpus-through-the-queue",
    ]
    assert sorted(found["ValidatingAdmissionPolicy"]) == policies
    assert sorted(found["ValidatingAdmissionPolicyBinding"]) == policies
    assert "Secret" not in found  # never overwrites the real one
    assert found["PriorityClass"] == ["gpuqueue-workload"]  # every worker's
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
        # The web (logs) and beat (its Lease) with accounts of their own; the migration never
        # calls Kubernetes.
        assert token is (name != "gpuqueue-migrate"), name
        account = spec.get("serviceAccountName", "gpuqueue")  # the hook Job: none to mount
        own = name in ("gpuqueue-web", "gpuqueue-beat")
        assert account == (name if own else "gpuqueue"), name


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
        (doc["kind"], doc["metadata"]["name"]): doc["rules"]
        for doc in yaml.safe_load_all((DEPLOY / "base" / "rbac.yaml").read_text())
        if doc and doc["kind"] in ("ClusterRole", "Role")
    }
    chart = {
        (o["kind"], o["metadata"]["name"]): o["rules"]
        for o in render(TEAMS)
        if o["kind"] in ("ClusterRole", "Role")
    }
    assert chart == base  # release "gpuqueue": the same names, the same rules
    # Bound cluster-wide: only gpuqueue's own reads of nodes and pods; the web's, per namespace.
    cluster_wide = [o for o in render(TEAMS) if o["kind"] == "ClusterRoleBinding"]
    assert [
        (b["roleRef"]["name"], [who["name"] for who in b["subjects"]]) for b in cluster_wide
    ] == [("gpuqueue-cluster-reader", ["gpuqueue"])]
    bindings = [o for o in render(TEAMS) if o["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == [
        "gpuqueue",
        *["team-a"] * 2,
        *["team-b"] * 2,
    ]
    (role,) = [o for o in render(TEAMS) if o["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "gpuqueue"  # the Leases: the release namespace only


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
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
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
        name: str | None = None,
        who: str = user,
    ) -> bool:
        review = {
            "spec": {
                "user": who,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
                "resourceAttributes": {
                    "verb": verb,
                    "resource": resource,
                    "group": group,
                    "namespace": namespace,
                    "subresource": sub,
                    "name": name,
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
    # The leader election's Leases: its own two, in the release namespace, and nowhere else.
    lease = "coordination.k8s.io"
    assert may("create", "leases", NAMESPACE, lease)
    for name in ("helmtest-watcher", "helmtest-beat"):
        assert may("get", "leases", NAMESPACE, lease, name=name)
        assert may("update", "leases", NAMESPACE, lease, name=name)
    assert not may("update", "leases", NAMESPACE, lease, name="kube-scheduler")
    assert not may("create", "leases", "team-a", lease) and not may("create", "leases", None, lease)
    assert not may("update", "leases", "kube-system", lease, name="helmtest-watcher")
    # The web reads workers' logs (the pod, then its log) in team namespaces and nothing else.
    web = f"system:serviceaccount:{NAMESPACE}:helmtest-web"
    for team in ("team-a", "team-b"):
        assert may("list", "pods", team, who=web) and may("get", "pods", team, sub="log", who=web)
    assert not may("list", "pods", who=web)  # not cluster-wide
    assert not may("list", "pods", "default", who=web) and not may(
        "list", "pods", NAMESPACE, who=web
    )
    assert not may("get", "pods", "default", sub="log", who=web)
    assert not may("get", "pods", NAMESPACE, sub="log", who=web)
    assert not may("create", "jobs", "team-a", "batch", who=web)
    assert not may("get", "secrets", "team-a", who=web) and not may(
        "patch", "pods", "team-a", who=web
    )
    assert not may("list", "nodes", who=web) and not may(
        "create", "leases", NAMESPACE, lease, who=web
    )
    # Beat holds its Lease and may do nothing else: its token is not gpuqueue's.
    beat = f"system:serviceaccount:{NAMESPACE}:helmtest-beat"
    assert may("update", "leases", NAMESPACE, lease, name="helmtest-beat", who=beat)
    assert not may("create", "jobs", "team-a", "batch", who=beat)
    assert not may("list", "pods", who=beat) and not may("get", "secrets", "team-a", who=beat)


def documented_install_sets() -> list[str]:
    """The `--set` values of the `helm install` in docs/kubernetes.md, as written there."""
    text = (DEPLOY.parent / "docs" / "kubernetes.md").read_text()
    command = text.split("helm install gpuqueue deploy/helm/gpuqueue", 1)[1]
    command = command.split("\n#", 1)[0].replace("\\\n", " ")
    words = shlex.split(command)
    return [words[i + 1] for i, word in enumerate(words) if word == "--set"]


def test_the_documented_install_is_ready_and_scraped_with_its_own_allowed_hosts(
    settings: Any, db: Any
) -> None:
    """With the docs' `config.allowedHosts`, the web's readiness probe (its Host header, or the
    pod's IP when it sends none) and the ServiceMonitor's scrape (the pod's IP and port) reach
    /healthz and /metrics of the real app with the chart's settings, and are answered; any
    other path still refuses a Host the chart does not allow."""
    sets = documented_install_sets()
    assert any(s.startswith("config.allowedHosts=") for s in sets)
    objects = render(*sets)
    (config,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpuqueue-config"
    ]
    (web,) = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpuqueue-web"
    ]
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    settings.ALLOWED_HOSTS = config["data"]["GPUQUEUE_ALLOWED_HOSTS"].split(",")
    settings.GPUQUEUE_METRICS_TOKEN = "scrape-token"
    pod_ip = "10.244.3.17:8000"
    probe = web["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]
    host = {h["name"]: h["value"] for h in probe.get("httpHeaders", [])}.get("Host", pod_ip)
    app = Client()
    ready = app.get(probe["path"], HTTP_HOST=host)
    assert ready.status_code != 400, f"the readiness probe (Host: {host}) got 400"
    assert ready.json()["status"] in ("ok", "degraded", "unavailable")
    (endpoint,) = monitor["spec"]["endpoints"]
    bearer = {"HTTP_AUTHORIZATION": "Bearer scrape-token"}
    scraped = app.get(endpoint["path"], HTTP_HOST=pod_ip, **bearer)
    assert scraped.status_code == 200, scraped.content[:200]
    assert b"gpuqueue_pending_jobs" in scraped.content
    assert app.get(endpoint["path"], HTTP_HOST=pod_ip).status_code == 401  # still its token
    assert app.get("/api/v1/jobs/", HTTP_HOST=pod_ip).status_code == 400


def test_two_of_everything_spread_over_nodes_and_watcher_and_beat_elect_a_leader() -> None:
    objects = render(TEAMS)
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    for component in ("web", "worker", "watcher", "beat"):
        deployment = deployments[f"gpuqueue-{component}"]
        assert deployment["spec"]["replicas"] == 2, component
        assert "strategy" not in deployment["spec"], component  # rolls: the old one releases
        spec = deployment["spec"]["template"]["spec"]
        (term,) = spec["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        selector = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        assert selector == deployment["spec"]["selector"]["matchLabels"], component
    for component in ("watcher", "beat"):
        (container,) = deployments[f"gpuqueue-{component}"]["spec"]["template"]["spec"][
            "containers"
        ]
        command = container["command"]
        at = command.index("--lease-namespace")
        assert command[at + 1 : at + 4] == [
            "$(POD_NAMESPACE)",
            "--lease-name",
            f"gpuqueue-{component}",
        ]
        assert {
            "name": "POD_NAMESPACE",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        } in container["env"]


def test_no_disruption_budget_blocks_a_drain_whatever_the_replicas() -> None:
    """minAvailable 1 over one replica refuses every eviction, and `kubectl drain` waits on it
    forever; maxUnavailable 1 lets one go at a time, the last one too."""
    for replicas in ("1", "2"):
        sets = [f"replicas.{c}={replicas}" for c in ("web", "worker", "watcher", "beat")]
        budgets = [o for o in render(TEAMS, *sets) if o["kind"] == "PodDisruptionBudget"]
        assert len(budgets) == 4
        for budget in budgets:
            assert budget["spec"].get("maxUnavailable") == 1, budget["metadata"]["name"]
            assert "minAvailable" not in budget["spec"], budget["metadata"]["name"]
