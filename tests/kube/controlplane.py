"""A real Kubernetes control plane on this machine: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (fake kubelets), built from Go modules and cached outside the repository.

    python -m tests.kube.controlplane build     # build what is missing (make kube-build)
    python -m tests.kube.controlplane up        # build, start with GPU nodes, print KUBECONFIG

The components are pinned in scripts/controlplane/ (go.mod for Kubernetes and etcd, KWOK_VERSION
for kwok); the cache's folder name carries the release and a digest of those pins, so changing
one rebuilds. Two releases are pinned, each cached in its own folder: v1.34.4 (the default;
scripts/controlplane/go.mod) and v1.37.2 (scripts/controlplane/v1.37.2/go.mod). The environment
variable GPUQUEUE_KUBE_VERSION chooses one for the whole process; on 1.37 the Workload API
(scheduling.k8s.io/v1beta1, feature gate GenericWorkload, beta and off by default) is turned on.
kwok plays every node annotated `kwok.x-k8s.io/node=fake` by the stages in
scripts/controlplane/kwok.yaml: a pod runs as soon as it is bound, finishes after the seconds of
its `gpuqueue.dev/sim-duration-seconds` annotation with the exit code of
`gpuqueue.dev/sim-exit-code` (the simulated backend's annotations), and a deleted pod lingers up
to its grace period, as a real one does; a pod of gpuqueue's own migration ends only once the
exit code of its command, run in its place, is reported in `gpuqueue.dev/sim-exit-code`.
kubectl of the same release is built when a test first asks for it (kubectl_binary, from
scripts/kubectl).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuqueue.cluster.simulated import load_cluster_file

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "scripts" / "controlplane"
KWOK_CONFIG = MODULE / "kwok.yaml"
# The Kubernetes releases the tests build, each from its own pins (a go.mod and go.sum).
MODULES = {"v1.34.4": MODULE, "v1.37.2": MODULE / "v1.37.2"}
DEFAULT_KUBE_VERSION = "v1.34.4"
KUBE_VERSION = os.environ.get("GPUQUEUE_KUBE_VERSION") or DEFAULT_KUBE_VERSION
if KUBE_VERSION not in MODULES:
    raise SystemExit(
        f"GPUQUEUE_KUBE_VERSION={KUBE_VERSION}: the tests pin {', '.join(sorted(MODULES))}"
    )
KUBE_MODULE = MODULES[KUBE_VERSION]
# The feature gates (on every component) and API versions (runtime-config) of a release's test
# control plane beyond its defaults: on 1.37 the Workload and PodGroup API, beta but off.
FEATURE_GATES = {"v1.37.2": "GenericWorkload=true"}
RUNTIME_CONFIG = {"v1.37.2": "scheduling.k8s.io/v1beta1=true"}
# Further kube-apiserver flags of a release: 1.37 refuses a loopback advertise address to the
# endpoint reconciler of the `kubernetes` Service, which nothing on this control plane reads.
APISERVER_FLAGS = {"v1.37.2": ("--endpoint-reconciler-type=none",)}
KWOK_VERSION = "v0.8.0"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# What scripts/controlplane/go.mod builds: binary -> (package, the file name `go build` gives it).
GO_PACKAGES = {
    "etcd": ("go.etcd.io/etcd/server/v3", "server"),
    **{
        name: (f"k8s.io/kubernetes/cmd/{name}", name)
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    },
}
# kubectl of the same release, from a module of its own (scripts/kubectl): built only when the
# test of the documented install asks for it.
KUBECTL_MODULE = ROOT / "scripts" / "kubectl"
KUBECTL_VERSION = "v1.34.4"  # scripts/kubectl/go.mod's
ADMIN_TOKEN = "gpuqueue-test-admin"  # noqa: S105 - a loopback-only test cluster's token
FAKE_NODE = {"kwok.x-k8s.io/node": "fake"}
DEFAULT_NODES = ROOT / "gpuqueue" / "cluster" / "default_cluster.yaml"


class Unavailable(RuntimeError):
    """The control plane cannot be built or started here (no Go, a failed build)."""


# Building ----------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where the binaries live: $GPUQUEUE_KUBE_CACHE, else
    ~/.cache/gpuqueue/controlplane-<release>-<pins>."""
    if explicit := os.environ.get("GPUQUEUE_KUBE_CACHE"):
        return Path(explicit)
    pins = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        pins.update((KUBE_MODULE / name).read_bytes())
    pins.update(KWOK_VERSION.encode())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpuqueue" / f"controlplane-{KUBE_VERSION}-{pins.hexdigest()[:12]}"


def go_binary() -> str | None:
    """Go on the PATH, else where its official installer puts it (a PATH without it is common
    in non-login shells and CI)."""
    found = shutil.which("go")
    if found is None and Path("/usr/local/go/bin/go").is_file():
        found = "/usr/local/go/bin/go"
    return found


def missing_binaries(where: Path | None = None) -> list[str]:
    where = where or cache_dir()
    return [name for name in BINARIES if not (where / name).is_file()]


def build(log: Any = sys.stderr) -> Path:
    """Build the missing binaries into the cache (a lock keeps two builds apart); returns it.

    1. etcd and the three Kubernetes commands from our module (one `go build`).
    2. kwok with `go install` at its pinned version (its module has no replacements), once
       into ~/.cache/gpuqueue/kwok-<version>, copied from there into each release's folder.
    """
    target = cache_dir()
    if not missing_binaries(target):
        return target
    go = go_binary()
    if go is None:
        raise Unavailable("Go is not installed (needed once to build the control plane)")
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = missing_binaries(target)
        if not missing:
            return target
        started = time.monotonic()
        print(f"building the control plane ({', '.join(missing)}) into {target}", file=log)
        staging = Path(tempfile.mkdtemp(prefix="build-", dir=target))
        try:
            built = [name for name in missing if name in GO_PACKAGES]
            if built:  # one build: the packages share most of their dependencies
                _go_build(go, {name: GO_PACKAGES[name] for name in built}, staging)
            if "kwok" in missing:  # one build of kwok serves every release
                kwok = install_binary(
                    f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}",
                    "kwok",
                    target.parent / f"kwok-{KWOK_VERSION}",
                )
                shutil.copy2(kwok, staging / "kwok")
            for name in missing:
                (staging / name).rename(target / name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        print(f"built in {time.monotonic() - started:.0f} s", file=log)
    return target


def kubectl_binary() -> Path:
    """~/.cache/gpuqueue/kubectl-<release>-<pins>/kubectl, built from scripts/kubectl (the
    control plane's release and replacements) when first asked for, behind a lock."""
    pins = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        pins.update((KUBECTL_MODULE / name).read_bytes())
    target = cache_dir().parent / f"kubectl-{KUBECTL_VERSION}-{pins.hexdigest()[:12]}"
    binary = target / "kubectl"
    if binary.is_file():
        return binary
    go = go_binary()
    if go is None:
        raise Unavailable("Go is not installed (needed once to build kubectl)")
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            staging = Path(tempfile.mkdtemp(prefix="build-", dir=target))
            try:
                kubectl = {"kubectl": ("k8s.io/kubernetes/cmd/kubectl", "kubectl")}
                _go_build(go, kubectl, staging, module=KUBECTL_MODULE, version=KUBECTL_VERSION)
                (staging / "kubectl").rename(binary)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return binary


def _go_build(
    go: str,
    packages: Mapping[str, tuple[str, str]],
    staging: Path,
    module: Path | None = None,
    version: str | None = None,
) -> None:
    """One `go build` in `module` of packages (name -> package, the file `go build` names),
    each into staging/<name>, stamped with KUBE_VERSION as the release's own build stamps it."""
    module, version = module or KUBE_MODULE, version or KUBE_VERSION
    ldflags = (
        "-s -w"
        f" -X k8s.io/component-base/version.gitVersion={version}"
        f" -X k8s.io/component-base/version.gitMajor=1"
        f" -X k8s.io/component-base/version.gitMinor={version.split('.')[1]}"
    )
    # A build cache of its own, removed with the staging folder: 3.4 GB that nothing reuses
    # once the binaries are cached.
    _go(
        [go, "build", "-trimpath", "-ldflags", ldflags, "-o", f"{staging}/"]
        + [package for package, _ in packages.values()],
        cwd=module,
        env={"GOCACHE": str(staging / "go-build")},
    )
    for name, (_, built) in packages.items():
        (staging / built).rename(staging / name)


def install_binary(package: str, name: str, target: Path) -> Path:
    """target/name, built once with `go install package@version` (a module with no
    replacements: helm), behind a lock of its own and through a staging folder, so that a
    half-built binary is never there."""
    binary = target / name
    if binary.is_file():
        return binary
    go = go_binary()
    if go is None:
        raise Unavailable(f"Go is not installed (needed once to build {name})")
    target.mkdir(parents=True, exist_ok=True)
    with open(target / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            staging = Path(tempfile.mkdtemp(prefix="build-", dir=target))
            try:
                _go_install(go, package, staging)
                (staging / name).rename(binary)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return binary


def _go_install(go: str, package: str, into: Path) -> None:
    """`go install package` into the folder `into`, with a build cache there too (removed with
    it: nothing reuses it once the binary is cached)."""
    _go(
        [go, "install", "-trimpath", "-ldflags", "-s -w", package],
        cwd=into,
        env={"GOCACHE": str(into / "go-build"), "GOBIN": str(into), "GOFLAGS": "-mod=mod"},
    )


def _go(command: list[str], cwd: Path, env: Mapping[str, str] | None = None) -> None:
    result = subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise Unavailable(f"{' '.join(command[:2])} failed:\n{result.stderr[-4000:]}")


# Nodes -------------------------------------------------------------------------------------


def node_manifests(cluster_file: Path = DEFAULT_NODES) -> list[dict[str, Any]]:
    """kwok Nodes from a cluster file in the simulated backend's format (its own parser), so
    both backends can offer the same nodes."""
    return [
        fake_node(n.name, n.capacity, labels=n.labels, taints=n.taints)
        for n in load_cluster_file(cluster_file)
    ]


def fake_node(
    name: str,
    gpus: Mapping[str, int],
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A Node that kwok plays, with its GPUs in capacity and allocatable."""
    resources = {
        "cpu": "128",
        "memory": "1Ti",
        "pods": "110",
        **{k: str(v) for k, v in gpus.items()},
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                **(labels or {}),
            },
            "annotations": dict(FAKE_NODE),
        },
        "spec": {"taints": [dict(t) for t in taints]},
        "status": {"capacity": resources, "allocatable": resources},
    }


# Running -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _release_flags() -> list[str]:
    """The feature gates the release's test control plane turns on (FEATURE_GATES)."""
    gates = FEATURE_GATES.get(KUBE_VERSION)
    return [f"--feature-gates={gates}"] if gates else []


@dataclass
class ControlPlane:
    """One running control plane; `start()` returns once the API answers and kwok plays nodes."""

    workdir: Path
    bin_dir: Path = field(default_factory=cache_dir)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    etcd_url: str = ""
    server: str = ""
    # Further kube-apiserver flags (an audit log: benchmarks/peers counts requests by client).
    apiserver_args: tuple[str, ...] = ()

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def start(self) -> ControlPlane:
        """1. Keys and the admin token. 2. etcd. 3. kube-apiserver, until /readyz.
        4. kubeconfig with the apiserver's own certificate as CA. 5. controller-manager,
        scheduler and kwok."""
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise Unavailable(f"not built: {', '.join(missing)} (run make kube-build)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        # 1.
        key, pub = pki / "sa.key", pki / "sa.pub"
        if not key.exists():
            subprocess.run(
                ["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True
            )
            subprocess.run(
                ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
                check=True,
                capture_output=True,
            )
        tokens = pki / "tokens.csv"
        tokens.write_text(f'{ADMIN_TOKEN},admin,admin,"system:masters"\n')
        # 2.
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            "--name=gq",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=gq=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        )
        # 3.
        self.start_apiserver(free_port())
        # 4.
        self.write_kubeconfig()
        # 5.
        kubeconfig = str(self.kubeconfig)
        self._spawn(
            "kube-controller-manager",
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            f"--service-account-private-key-file={key}",
            f"--root-ca-file={pki / 'apiserver.crt'}",
            # Each controller as itself, as kubeadm runs them.
            "--use-service-account-credentials=true",
            *_release_flags(),
            "--concurrent-job-syncs=20",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--v=1",
        )
        self._spawn(
            "kube-scheduler",
            f"--kubeconfig={kubeconfig}",
            *_release_flags(),
            "--leader-elect=false",
            "--secure-port=0",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--v=1",
        )
        self._spawn(
            "kwok",
            f"--kubeconfig={kubeconfig}",
            f"--config={KWOK_CONFIG}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=10.244.0.1",
            "--cidr=10.244.0.1/16",
            "--server-address=",
            "--node-lease-duration-seconds=40",
            "--v=-4",
        )
        return self

    def start_apiserver(self, port: int | None = None) -> None:
        """Start (or restart, on the same port) kube-apiserver and wait until it is ready."""
        port = port or int(self.server.rsplit(":", 1)[1])
        self.server = f"https://127.0.0.1:{port}"
        pki = self.workdir / "pki"
        self._spawn(
            "kube-apiserver",
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={pki}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            *_release_flags(),
            *APISERVER_FLAGS.get(KUBE_VERSION, ()),
            *(
                [f"--runtime-config={RUNTIME_CONFIG[KUBE_VERSION]}"]
                if KUBE_VERSION in RUNTIME_CONFIG
                else []
            ),
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            "--profiling=false",
            "--v=0",
            *self.apiserver_args,
        )
        self.wait_ready()

    def stop_apiserver(self) -> None:
        self._stop("kube-apiserver")

    def wait_ready(self, timeout: float = 90.0) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # readiness only; clients verify with the CA
        deadline = time.monotonic() + timeout
        request = urllib.request.Request(
            f"{self.server}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
        while True:
            self._check_alive()
            try:
                with urllib.request.urlopen(request, context=context, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"kube-apiserver not ready in {timeout:.0f} s; see {self.workdir}"
                )
            time.sleep(0.2)

    def write_kubeconfig(self) -> None:
        ca = (self.workdir / "pki" / "apiserver.crt").read_bytes()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gpuqueue-test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": base64.b64encode(ca).decode(),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}}],
            "contexts": [
                {"name": "gpuqueue-test", "context": {"cluster": "gpuqueue-test", "user": "admin"}}
            ],
            "current-context": "gpuqueue-test",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - kept by the process
        self.processes[name] = subprocess.Popen(
            [str(self.bin_dir / name), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise Unavailable(f"{name} exited with status {process.returncode}:\n{tail}")

    def _stop(self, name: str, timeout: float = 10.0) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop(self) -> None:
        """Stop in the reverse order of start: nothing is left running."""
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            self._stop(name)


@contextlib.contextmanager
def running(workdir: Path) -> Iterator[ControlPlane]:
    plane = ControlPlane(workdir, build())
    try:
        yield plane.start()
    finally:
        plane.stop()


def create_nodes(api_client: Any, nodes: Sequence[Mapping[str, Any]]) -> None:
    """Create (or leave) each Node; kwok marks them Ready once it sees them."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    for node in nodes:
        try:
            core.create_node(node, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise


def create_namespaces(api_client: Any, names: Sequence[str]) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    for name in names:
        try:
            core.create_namespace({"metadata": {"name": name}})
        except ApiException as exc:
            if exc.status != 409:
                raise


def wait_nodes_ready(api_client: Any, names: Sequence[str], timeout: float = 60.0) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    deadline = time.monotonic() + timeout
    while True:
        listed = json.loads(core.list_node(_preload_content=False).data)
        ready = {
            item["metadata"]["name"]
            for item in listed["items"]
            for condition in (item.get("status") or {}).get("conditions") or []
            if condition.get("type") == "Ready" and condition.get("status") == "True"
        }
        if set(names) <= ready:
            return
        if time.monotonic() > deadline:
            raise Unavailable(f"nodes not ready in {timeout:.0f} s: {sorted(set(names) - ready)}")
        time.sleep(0.2)


GPUQUEUE_NAMESPACE = "gpuqueue"
DEPLOY = ROOT / "deploy"
# How long the ServiceAccount's token in `make kube`'s kubeconfig lasts (a new one each start).
SERVICE_ACCOUNT_TOKEN_SECONDS = 7 * 24 * 3600


def install_as_deploy(
    api_client: Any, team_namespaces: Sequence[str], admin_kubeconfig: Path
) -> Path:
    """Make this cluster one that deploy/ installed gpuqueue into, and return the path of a
    kubeconfig (beside the admin's, `gpuqueue.kubeconfig`) that acts as gpuqueue's
    ServiceAccount, so that `make run` against it has the rights and meets the admission that
    gpuqueue has on a real cluster:

    1. the `gpuqueue` namespace, deploy/base's ServiceAccount and its RBAC (deploy/base/rbac.yaml),
       and the workers' PriorityClass (deploy/base/priorityclass.yaml, GPUQUEUE_K8S_PRIORITY_CLASS);
    2. the admission policy and its binding (deploy/base/admission-policy.yaml, as it is);
    3. each team namespace, labelled and granted as deploy/overlays/example does it (the labels
       of its first namespace, each RoleBinding of its team-rolebindings.yaml);
    4. a token for the ServiceAccount from the TokenRequest API, in a kubeconfig with the
       admin's server and CA.

    Objects are server-side applied, so that `up` after `up` changes nothing."""
    from kubernetes import client
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(api_client)

    def apply(doc: dict[str, Any], namespace: str | None = None) -> None:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        if resource.namespaced:
            namespace = doc["metadata"].get("namespace") or namespace or GPUQUEUE_NAMESPACE
            doc = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
        dynamic.server_side_apply(
            resource,
            body=doc,
            namespace=namespace if resource.namespaced else None,
            field_manager="gpuqueue-make-kube",
            force_conflicts=True,
        )

    def docs(path: Path) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all(path.read_text()) if d]

    # 1. and 2.
    apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GPUQUEUE_NAMESPACE}})
    for name in ("serviceaccount.yaml", "rbac.yaml", "priorityclass.yaml", "admission-policy.yaml"):
        for doc in docs(DEPLOY / "base" / name):
            apply(doc)
    # 3.
    overlay = DEPLOY / "overlays" / "example"
    labels = docs(overlay / "team-namespaces.yaml")[0]["metadata"].get("labels", {})
    bindings = {d["metadata"]["name"]: d for d in docs(overlay / "team-rolebindings.yaml")}
    for namespace in team_namespaces:
        apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "labels": labels},
            }
        )
        for binding in bindings.values():
            apply({**binding, "metadata": {**binding["metadata"], "namespace": namespace}})
    # 4.
    token = (
        client.CoreV1Api(api_client)
        .create_namespaced_service_account_token(
            GPUQUEUE_NAMESPACE,
            GPUQUEUE_NAMESPACE,
            {"spec": {"expirationSeconds": SERVICE_ACCOUNT_TOKEN_SECONDS}},
        )
        .status.token
    )
    config = yaml.safe_load(admin_kubeconfig.read_text())
    config["users"] = [{"name": "gpuqueue", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "gpuqueue"
    path = admin_kubeconfig.with_name("gpuqueue.kubeconfig")
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def api_client_for(kubeconfig: Path) -> Any:
    """A client configured as gpuqueue's processes configure theirs (KubernetesBackend's
    from_settings): no retries of urllib3's own, a connection per release thread."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.retries = 0
    configuration.connection_pool_maxsize = 16
    return client.ApiClient(configuration)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kube.controlplane", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the missing components into the cache")
    up = sub.add_parser("up", help="start a control plane with GPU nodes until Ctrl-C")
    up.add_argument("--workdir", type=Path, default=ROOT / "data" / "kube")
    up.add_argument("--nodes", type=Path, default=MODULE / "nodes.yaml")
    up.add_argument(
        "--namespaces",
        default="team-a,team-b,inference",
        help="team namespaces to create (default: the demo teams')",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build())
            return 0
        plane = ControlPlane(args.workdir, build())
        stop = {"now": False}

        def _stop(signum: int, frame: Any) -> None:
            stop["now"] = True

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        shutil.rmtree(args.workdir, ignore_errors=True)  # a fresh cluster each time
        plane.start()
        try:
            api = api_client_for(plane.kubeconfig)
            nodes = node_manifests(args.nodes)
            create_nodes(api, nodes)
            wait_nodes_ready(api, [n["metadata"]["name"] for n in nodes])
            teams = [n for n in args.namespaces.split(",") if n]
            as_gpuqueue = install_as_deploy(api, teams, plane.kubeconfig)
            print(f"control plane up: {len(nodes)} kwok nodes, team namespaces {args.namespaces}")
            print(f"as gpuqueue (make run): export KUBECONFIG={as_gpuqueue}")
            print(
                f"as the cluster admin (kubectl): export KUBECONFIG={plane.kubeconfig}", flush=True
            )
            while not stop["now"]:
                plane._check_alive()
                time.sleep(0.5)
        finally:
            plane.stop()
            print("control plane stopped")
        return 0
    except Unavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
