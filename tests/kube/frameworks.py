"""Kubeflow's training operator and KubeRay's operator as local processes against the test
control plane (tests/kube/controlplane.py): built from their Go modules, their CRDs from the
modules' own files, each running as its ServiceAccount (the identity the admission policy
knows it by).

    python -m tests.kube.frameworks build     # build what is missing

1. `build(name)`: `go install <package>@<version>` into ~/.cache/gpuqueue/<name>-<version>/,
   through a staging folder behind a lock, as kwok, helm and kueue are built (neither module
   has replacements). A cold build takes minutes.
2. `crds(name)`: the CustomResourceDefinitions of the module in the Go module cache (`go mod
   download -json` says where): the training operator's PyTorchJob, KubeRay's RayJob and
   RayCluster.
3. `Operator`: the manager with webhooks off (the training operator serves its webhook on a
   free loopback port, registered nowhere; KubeRay's is off unless ENABLE_WEBHOOKS), metrics
   and health probes on free loopback ports, no leader election, and a kubeconfig holding a
   token of its ServiceAccount (bound to cluster-admin: the test's operator is trusted, the
   policy is about everyone else).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.kube.controlplane import (
    Unavailable,
    cache_dir,
    free_port,
    go_binary,
    install_binary,
)

# Where the training operator reads its webhook certificate (a constant of its code: the
# Deployment mounts the certificate Secret there).
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # noqa: S108 - the operator's own path


@dataclass(frozen=True)
class Framework:
    name: str  # the cache folder's and the binary's name
    module: str
    version: str
    package: str  # what `go install` builds
    binary: str  # the file `go install` names
    crd_dir: str  # in the module
    crd_files: tuple[str, ...]
    namespace: str  # where its ServiceAccount lives
    account: str


TRAINING = Framework(
    name="training-operator",
    module="github.com/kubeflow/training-operator",
    version="v1.8.1",
    package="github.com/kubeflow/training-operator/cmd/training-operator.v1",
    binary="training-operator.v1",
    crd_dir="manifests/base/crds",
    crd_files=("kubeflow.org_pytorchjobs.yaml",),
    namespace="kubeflow",
    account="training-operator",
)
KUBERAY = Framework(
    name="ray-operator",
    module="github.com/ray-project/kuberay/ray-operator",
    version="v1.5.0",
    package="github.com/ray-project/kuberay/ray-operator",
    binary="ray-operator",
    crd_dir="config/crd/bases",
    crd_files=("ray.io_rayjobs.yaml", "ray.io_rayclusters.yaml", "ray.io_rayservices.yaml"),
    namespace="ray-system",
    account="kuberay-operator",
)
FRAMEWORKS = (TRAINING, KUBERAY)


def framework_cache(fw: Framework) -> Path:
    return cache_dir().parent / f"{fw.name}-{fw.version}"


def build(fw: Framework) -> Path:
    """The operator's binary, built once (minutes)."""
    return install_binary(f"{fw.package}@{fw.version}", fw.binary, framework_cache(fw))


def module_dir(fw: Framework) -> Path:
    go = go_binary()
    if go is None:
        raise Unavailable(f"Go is not installed (needed to find {fw.module})")
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{fw.module}@{fw.version}"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tempfile.gettempdir(),
    )
    if result.returncode != 0:
        raise Unavailable(f"go mod download {fw.module}@{fw.version} failed:\n{result.stderr}")
    return Path(json.loads(result.stdout)["Dir"])


def crds(fw: Framework) -> list[dict[str, Any]]:
    where = module_dir(fw) / fw.crd_dir
    return [
        doc
        for name in fw.crd_files
        for doc in yaml.safe_load_all((where / name).read_text())
        if doc
    ]


def install_crds(api_client: Any, fw: Framework, timeout: float = 60.0) -> None:
    """Create the CRDs (or leave those already there) and wait until each is Established."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(api_client)
    names = []
    for crd in crds(fw):
        names.append(crd["metadata"]["name"])
        try:
            ext.create_custom_resource_definition(crd, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            got = json.loads(ext.read_custom_resource_definition(name, _preload_content=False).data)
            conditions = (got.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise Unavailable(f"CRD {name} not established in {timeout:.0f} s")
            time.sleep(0.2)


def account_kubeconfig(api_client: Any, fw: Framework, plane_kubeconfig: Path, into: Path) -> Path:
    """A kubeconfig holding a token of the operator's ServiceAccount (made, and bound to
    cluster-admin, if missing)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    for create in (
        lambda: core.create_namespace({"metadata": {"name": fw.namespace}}),
        lambda: core.create_namespaced_service_account(
            fw.namespace, {"metadata": {"name": fw.account}}
        ),
        lambda: rbac.create_cluster_role_binding(
            {
                "metadata": {"name": f"test-{fw.name}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": fw.account, "namespace": fw.namespace}
                ],
            }
        ),
    ):
        try:
            create()
        except ApiException as exc:
            if exc.status != 409:
                raise
    token = core.create_namespaced_service_account_token(
        fw.account, fw.namespace, {"spec": {"expirationSeconds": 86400}}
    ).status.token
    config = yaml.safe_load(plane_kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    path = into / f"{fw.name}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Operator:
    """One operator as a process."""

    fw: Framework
    workdir: Path
    kubeconfig: Path
    binary: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.fw.name}.log"

    def start(self) -> Operator:
        self.workdir.mkdir(parents=True, exist_ok=True)
        binary = self.binary or build(self.fw)
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        if self.fw is TRAINING:
            from kubernetes import client

            from tests.kube.controlplane import api_client_for

            # The certificate rotator keeps its CA in this Secret (it must exist) and waits for
            # it before it starts the controllers; the webhook it serves is registered nowhere.
            core = client.CoreV1Api(api_client_for(self.kubeconfig))
            try:
                core.create_namespaced_secret(
                    self.fw.namespace,
                    {"metadata": {"name": "training-operator-webhook-cert"}},
                )
            except Exception as exc:  # noqa: BLE001 - 409: already there
                if getattr(exc, "status", None) != 409:
                    raise
            args = [
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                f"--webhook-server-port={free_port()}",
                "--enable-scheme=pytorchjob",
                "--leader-elect=false",
            ]
            env["MY_POD_NAMESPACE"] = self.fw.namespace
        else:
            args = [
                f"--metrics-addr=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                "--enable-leader-election=false",
                "--log-stdout-encoder=console",
            ]
            env.pop("ENABLE_WEBHOOKS", None)
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept by the process
        self.process = subprocess.Popen(
            [str(binary), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            cwd=self.workdir,
        )

        if self.fw is TRAINING:
            self._mount_certificates()
        return self

    def _mount_certificates(self, timeout: float = 60.0) -> None:
        """What the Deployment's Secret volume does for the training operator: its certificate
        rotator fills the Secret, then waits for the files in CERT_DIR (a fixed path) before it
        starts the controllers."""
        from kubernetes import client

        from tests.kube.controlplane import api_client_for

        core = client.CoreV1Api(api_client_for(self.kubeconfig))
        deadline = time.monotonic() + timeout
        while True:
            data = (
                core.read_namespaced_secret(
                    "training-operator-webhook-cert", self.fw.namespace
                ).data
                or {}
            )
            if "tls.crt" in data and "tls.key" in data:
                break
            if not self.alive() or time.monotonic() > deadline:
                raise Unavailable(f"the training operator made no certificate:\n{self.log_tail()}")
            time.sleep(0.5)
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            (CERT_DIR / name).write_bytes(base64.b64decode(data[name]))

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


if __name__ == "__main__":
    if sys.argv[1:] == ["build"]:
        for fw in FRAMEWORKS:
            print(build(fw))
