"""The documented install (docs/kubernetes.md, "From `helm install` to the first job"), run as
written on a real control plane: the docs' own shell block, read from the docs, with kubectl and
helm of their pinned releases, on a fresh cluster that has the Prometheus Operator's
ServiceMonitor CRD (from its Go module). Then: every Deployment available with its replicas, the
hook's migration done, the real web answering the kubelet's readiness probe and the
ServiceMonitor's scrape as the chart configures both, a drain not blocked by the disruption
budgets, and `helm uninstall` removing what the install made.

What is substituted, and why: the Secret's DATABASE_URL and REDIS_URL (a fresh database on the
tests' PostgreSQL, the tests' Redis). kwok pulls no image and runs no container, so two
processes run here in place of the kubelet, each with the command and environment of its pod as
installed: the migration hook's (kwok ends its pod with the exit code reported: see
scripts/controlplane/kwok.yaml) and the web's, on a free local port. Steps 4 and 5 of the block
(`kubectl exec` into the web, the CLI through the ingress) need a running container and an
ingress: they are not run here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from gpuqueue.ops.embedded import free_port
from tests.kube.controlplane import (
    ROOT,
    ControlPlane,
    Unavailable,
    api_client_for,
    build,
    create_nodes,
    fake_node,
    kubectl_binary,
    wait_nodes_ready,
)
from tests.kube.helm import helm_binary, service_monitor_crd

pytestmark = pytest.mark.slow

DOCS = ROOT / "docs" / "kubernetes.md"
SECTION = "## From `helm install` to the first job"
MIGRATION = "app.kubernetes.io/name=gpuqueue,app.kubernetes.io/component=migrate"
WEB = "app.kubernetes.io/name=gpuqueue,app.kubernetes.io/component=web"
EXIT_CODE = "gpuqueue.dev/sim-exit-code"  # what kwok ends the migration's pod with
NODES = [fake_node(f"node-{i}", {}) for i in range(3)]  # plain nodes: gpuqueue's own pods


def documented_block() -> str:
    """The first ```sh block of the install section, as written."""
    section = DOCS.read_text().split(SECTION, 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def install_commands(block: str) -> str:
    """The block's steps up to and including its `helm install` command (its continuation
    lines too)."""
    lines = block.splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith("helm install ")]
    end = start
    while lines[end].endswith("\\"):
        end += 1
    return "\n".join(lines[: end + 1]) + "\n"


def with_secret_value(commands: str, key: str, value: str) -> str:
    """The `--from-literal=KEY=…` of the Secret's command, given `value`."""
    replaced, count = re.subn(
        rf"--from-literal={key}=\S+", f"--from-literal={key}={shlex.quote(value)}", commands
    )
    assert count == 1, f"the docs create the Secret without {key}"
    return replaced


def documented_uninstall() -> list[str]:
    (command,) = re.findall(r"`(helm uninstall [^`]+)`", DOCS.read_text())
    return shlex.split(command)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A fresh control plane: the docs install into a cluster without gpuqueue, and the
    session's cluster carries deploy/'s objects under the names the chart gives them."""
    try:
        helm_binary(), kubectl_binary(), service_monitor_crd()
        plane = ControlPlane(tmp_path_factory.mktemp("install"), build())
    except Unavailable as exc:
        pytest.skip(f"no real control plane, kubectl, helm or ServiceMonitor CRD: {exc}")
    try:
        plane.start()
        api = api_client_for(plane.kubeconfig)
        create_nodes(api, NODES)
        wait_nodes_ready(api, [n["metadata"]["name"] for n in NODES])
        yield plane
    except Unavailable as exc:
        pytest.fail(f"the control plane did not start: {exc}")
    finally:
        plane.stop()


@pytest.fixture
def database() -> Iterator[str]:
    """The URL of a new, empty database on the tests' PostgreSQL server: the install's."""
    admin = os.environ["DATABASE_URL"]
    name = f"gq_install_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    yield urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class Cluster:
    def __init__(self, plane: ControlPlane) -> None:
        self.api = api_client_for(plane.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.dynamic = DynamicClient(self.api)

    def environment(self, namespace: str, container: Any) -> dict[str, str]:
        """What the kubelet would give the container: its envFrom, then its env."""
        env: dict[str, str] = {}
        for source in container.env_from or []:
            if source.config_map_ref:
                data = self.core.read_namespaced_config_map(source.config_map_ref.name, namespace)
                env.update(data.data or {})
            if source.secret_ref:
                secret = self.core.read_namespaced_secret(source.secret_ref.name, namespace)
                env.update({k: base64.b64decode(v).decode() for k, v in secret.data.items()})
        for variable in container.env or []:
            assert variable.value_from is None, f"{variable.name}: not a plain value"
            env[variable.name] = variable.value
        return env

    def available(self, namespace: str) -> dict[str, tuple[int, int]]:
        return {
            d.metadata.name: (d.spec.replicas, d.status.available_replicas or 0)
            for d in self.apps.list_namespaced_deployment(namespace).items
        }


def process_environment(pod_env: Mapping[str, str], home: Path) -> dict[str, str]:
    """The pod's environment, with this machine's PATH for the interpreter and tools (the
    image's own); nothing else of the test process's environment."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONUNBUFFERED": "1", **pod_env}


def run_in_place_of_the_kubelet(cluster: Cluster, pod: Any, home: Path) -> int:
    """Run the pod's one container's command with its environment here; its exit code."""
    (container,) = pod.spec.containers
    command = list(container.command)
    assert command[0] == "python", command
    command[0] = sys.executable  # the image's python: this checkout's interpreter
    env = process_environment(cluster.environment(pod.metadata.namespace, container), home)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.returncode


def play_the_migration_hook(
    kube: Cluster, install: subprocess.Popen[bytes], started: float, home: Path
) -> int:
    """While `helm install` runs: the hook's pod's command run here, its exit code reported for
    kwok to end the pod with. How many times it ran."""
    migrated = 0
    while install.poll() is None:
        assert time.monotonic() - started < 300, "helm install did not return in 300 s"
        try:
            pods = kube.core.list_namespaced_pod("gpuqueue", label_selector=MIGRATION).items
        except ApiException:  # the namespace is not there yet
            pods = []
        for pod in pods:
            if pod.status.phase == "Running" and EXIT_CODE not in (pod.metadata.annotations or {}):
                # A pre-install hook: nothing of the release exists while it runs.
                assert not kube.apps.list_namespaced_deployment("gpuqueue").items
                code = run_in_place_of_the_kubelet(kube, pod, home)
                kube.core.patch_namespaced_pod(
                    pod.metadata.name,
                    "gpuqueue",
                    {"metadata": {"annotations": {EXIT_CODE: str(code)}}},
                )
                migrated += 1
        time.sleep(0.3)
    return migrated


@contextlib.contextmanager
def the_web_as_installed(kube: Cluster, container: Any, home: Path) -> Iterator[str]:
    """The web container's command (granian) with its environment as installed, listening on
    a free local port instead of the pod's; yields its URL once it answers."""
    command = list(container.command)
    assert command[0] == "granian"
    command[0] = str(Path(sys.executable).with_name("granian"))
    port = free_port()
    command[command.index("--host") + 1] = "127.0.0.1"
    command[command.index("--port") + 1] = str(port)
    env = process_environment(kube.environment("gpuqueue", container), home)
    log_path = home / "web.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, log_path.read_text()[-3000:]
            try:
                get(url + "/healthz", {})
                break
            except OSError:
                assert time.monotonic() < deadline, "the web did not answer in 90 s"
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(30)


def get(url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_kwok_ends_a_migration_pod_only_with_the_exit_code_reported(cluster: ControlPlane) -> None:
    """kwok runs no command: a migration's pod must not pass for done after a delay, as an
    ordinary Job's pod does, but end with the exit code of the command run in its place.
    (Before the install: its admission policy refuses gpuqueue's annotations here.)"""
    kube = Cluster(cluster)
    namespace = "kwok-stages"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    wait_until(lambda: bool(kube.core.list_namespaced_service_account(namespace).items))
    batch = client.BatchV1Api(kube.api)
    labels = {"app.kubernetes.io/name": "gpuqueue", "app.kubernetes.io/component": "migrate"}
    for name, pod_labels in (("migrate", labels), ("ordinary", {"app": "ordinary"})):
        template = {
            "metadata": {
                "labels": pod_labels,
                "annotations": {"gpuqueue.dev/sim-duration-seconds": "1"},
            },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "x", "command": ["true"]}],
            },
        }
        batch.create_namespaced_job(
            namespace,
            {"metadata": {"name": name}, "spec": {"backoffLimit": 0, "template": template}},
        )

    def pod(job: str) -> Any:
        found = kube.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
        return found[0] if found else client.V1Pod(status=client.V1PodStatus())

    wait_until(lambda: pod("migrate").status.phase == "Running")
    wait_until(lambda: pod("ordinary").status.phase == "Succeeded")  # after its 1 s
    time.sleep(2)
    assert pod("migrate").status.phase == "Running"  # nobody ran it: not done
    kube.core.patch_namespaced_pod(
        pod("migrate").metadata.name, namespace, {"metadata": {"annotations": {EXIT_CODE: "3"}}}
    )
    wait_until(lambda: pod("migrate").status.phase == "Failed")
    (status,) = pod("migrate").status.container_statuses
    assert status.state.terminated.exit_code == 3


def test_the_documented_install_works_as_written(
    cluster: ControlPlane, database: str, tmp_path: Path
) -> None:
    kube = Cluster(cluster)
    # The Prometheus Operator's CRD, as a cluster with kube-prometheus-stack has it.
    crd = service_monitor_crd()
    client.ApiextensionsV1Api(kube.api).create_custom_resource_definition(crd)
    resource = kube.dynamic.resources
    for _ in range(100):
        try:
            monitors = resource.get(api_version="monitoring.coreos.com/v1", kind="ServiceMonitor")
            break
        except ResourceNotFoundError:  # discovery serves it once the CRD is established
            resource.invalidate_cache()
            time.sleep(0.2)
    else:
        raise AssertionError("the ServiceMonitor CRD was not served")

    # 1.-3. of the docs, as written but for the Secret's two servers.
    commands = install_commands(documented_block())
    commands = with_secret_value(commands, "DATABASE_URL", database)
    commands = with_secret_value(commands, "REDIS_URL", os.environ["REDIS_URL"])
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "kubectl").symlink_to(kubectl_binary())
    (tools / "helm").symlink_to(helm_binary())
    shell_env = {
        "PATH": f"{tools}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "KUBECONFIG": str(cluster.kubeconfig),
    }
    started = time.monotonic()
    transcript = tmp_path / "install.log"
    with transcript.open("wb") as out:
        install = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", commands],
            cwd=ROOT,
            env=shell_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        migrated = play_the_migration_hook(kube, install, started, tmp_path)
    finally:
        if install.poll() is None:
            install.kill()
            install.wait()
    assert install.returncode == 0, transcript.read_text()
    assert migrated == 1, transcript.read_text()  # once, by the hook
    print(f"\nthe documented install returned in {time.monotonic() - started:.1f} s")

    # --wait returned: every Deployment available with its replicas, two of each by default.
    assert kube.available("gpuqueue") == {
        f"gpuqueue-{name}": (2, 2) for name in ("web", "worker", "watcher", "beat")
    }
    # What each init container waits for holds: the hook migrated the Secret's database.
    web = kube.apps.read_namespaced_deployment("gpuqueue-web", "gpuqueue")
    (wait,) = web.spec.template.spec.init_containers
    check = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--check"],
        cwd=ROOT,
        env=process_environment(kube.environment("gpuqueue", wait), tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "migrate --check" in " ".join(wait.command)

    # The ServiceMonitor scrapes the web Service's port by name, on the app's metrics path.
    (monitor,) = monitors.get(namespace="gpuqueue").to_dict()["items"]
    (endpoint,) = monitor["spec"]["endpoints"]
    service = kube.core.read_namespaced_service("gpuqueue-web", "gpuqueue")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service.metadata.labels.items()
    (port,) = [p for p in service.spec.ports if p.name == endpoint["port"]]
    (container,) = web.spec.template.spec.containers
    (container_port,) = [p for p in container.ports if p.name == port.target_port]

    # The real web, with the installed configuration and Secret: the kubelet's readiness probe
    # and Prometheus's scrape of a pod by its IP, as the chart configures them.
    probe = container.readiness_probe.http_get
    assert probe.port == container_port.name
    pods = kube.core.list_namespaced_pod("gpuqueue", label_selector=WEB).items
    pod_ip = pods[0].status.pod_ip
    credentials = endpoint["authorization"]["credentials"]
    secret = kube.core.read_namespaced_secret(credentials["name"], "gpuqueue")
    token = base64.b64decode(secret.data[credentials["key"]]).decode()
    with the_web_as_installed(kube, container, tmp_path) as local:
        headers = {h.name: h.value for h in probe.http_headers or []}
        status, body = get(f"{local}{probe.path}", headers)
        assert status == 200, body[:500]  # Ready: the database and Redis answer
        assert json.loads(body)["status"] in ("ok", "degraded")
        scrape = f"{local}{endpoint['path']}"
        as_prometheus = {"Host": f"{pod_ip}:{container_port.container_port}"}
        status, body = get(scrape, {**as_prometheus, "Authorization": f"Bearer {token}"})
        assert status == 200, body[:500]
        assert b"gpuqueue_pending_jobs" in body
        assert get(scrape, as_prometheus)[0] == 401  # the Secret's token, nothing less

    # A drain: each web pod evicted in turn (policy/v1), one at a time, none refused.
    policy = client.PolicyV1Api(kube.api)

    def allowed(name: str) -> int:
        budget = policy.read_namespaced_pod_disruption_budget(name, "gpuqueue")
        return budget.status.disruptions_allowed if budget.status else 0

    budgets = [
        b.metadata.name for b in policy.list_namespaced_pod_disruption_budget("gpuqueue").items
    ]
    assert sorted(budgets) == [f"gpuqueue-{n}" for n in ("beat", "watcher", "web", "worker")]
    wait_until(lambda: all(allowed(name) == 1 for name in budgets))
    original = sorted(p.metadata.name for p in pods)

    def serving() -> set[str]:
        """Web pods that are ready and not being deleted."""
        return {
            p.metadata.name
            for p in kube.core.list_namespaced_pod("gpuqueue", label_selector=WEB).items
            if p.metadata.deletion_timestamp is None
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        }

    assert len(original) == 2
    for name in original:
        wait_until(lambda: allowed("gpuqueue-web") == 1)  # the other replica is available
        kube.core.create_namespaced_pod_eviction(
            name,
            "gpuqueue",
            {"metadata": {"name": name, "namespace": "gpuqueue"}},
        )  # 201; a budget that refused it would answer 429
        # The pods themselves, not the Deployment's status: that can still count the evicted
        # pod as available for a moment after the eviction.
        wait_until(lambda name=name: len(serving()) == 2 and name not in serving())
    assert not serving() & set(original)  # both replaced, one at a time

    # helm uninstall removes every object of the release's manifest.
    manifest = subprocess.run(
        ["helm", "get", "manifest", "gpuqueue", "-n", "gpuqueue"],
        env=shell_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    made = [doc for doc in yaml.safe_load_all(manifest) if doc]
    assert len(made) > 20
    uninstall = subprocess.run(
        documented_uninstall(), cwd=ROOT, env=shell_env, capture_output=True, text=True
    )
    assert uninstall.returncode == 0, uninstall.stderr

    def gone(obj: dict[str, Any]) -> bool:
        kind = resource.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace", "gpuqueue") if kind.namespaced else None
        try:
            kind.get(name=obj["metadata"]["name"], namespace=namespace)
        except NotFoundError:
            return True
        return False

    wait_until(lambda: all(gone(obj) for obj in made), timeout=60)
    # What the chart never made stays: the namespaces and the admin's Secret.
    assert kube.core.read_namespaced_secret("gpuqueue-secrets", "gpuqueue")
    assert kube.core.read_namespace("team-a")


def wait_until(done: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not done within {timeout:.0f} s"
        time.sleep(0.2)


def test_the_docs_install_block_is_what_this_test_runs() -> None:
    """The block's parts this test depends on are where it reads them: a drift fails here
    with a sentence rather than deep in the install."""
    commands = install_commands(documented_block())
    assert "kubectl create namespace gpuqueue" in commands
    assert "create secret generic gpuqueue-secrets" in commands
    assert "helm install gpuqueue deploy/helm/gpuqueue -n gpuqueue --wait" in commands
    assert "metrics.serviceMonitor.enabled=true" in commands
    assert documented_uninstall() == ["helm", "uninstall", "gpuqueue", "-n", "gpuqueue"]
