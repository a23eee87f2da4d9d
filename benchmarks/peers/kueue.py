"""Kueue as a local process against a test control plane: its build, its CRDs, its
configuration, and the queues that mirror gpuqueue's teams.

1. `build()`: `go install sigs.k8s.io/kueue/cmd/kueue@KUEUE_VERSION` into
   ~/.cache/gpuqueue/kueue-<version>/kueue, through a staging folder behind a lock, as
   tests/kube/controlplane.py builds kwok and helm (the module has no replacements).
2. `crds()`: the CustomResourceDefinitions of the module's own config/components/crd/bases, from
   the Go module cache (`go mod download -json` says where).
3. `Manager`: the controller manager with a Configuration of its own: no leader election, no
   internal certificate management, the webhook server on a free loopback port with a
   self-signed certificate (its webhooks are served but not registered with the apiserver, so
   nothing calls them), metrics and health probes off, the batch/job integration only, fair
   sharing on. The manager reads its metrics certificate from the fixed path
   /etc/kueue/metrics/certs even with metrics off; it runs in a mount namespace of its own
   (`unshare -m`) where /etc is an overlay holding that certificate, so this machine's /etc is
   left alone.
4. `queue_objects()`: the ResourceFlavors, ClusterQueues (one cohort) and LocalQueues that say
   what gpuqueue's flavors and quotas say: nominal quota = guarantee, borrowing limit = limit -
   guarantee, fair-sharing weight = weight, one flavor per GPU model by its node labels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.17.0"
API = "kueue.x-k8s.io/v1beta2"
COHORT = "gpuqueue"
QUEUE = "default"  # each team namespace's LocalQueue
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


class Unavailable(RuntimeError):
    """Kueue cannot be built or started here."""


# Building ----------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Beside the control plane's cache: ~/.cache/gpuqueue/kueue-<version>."""
    from tests.kube.controlplane import cache_dir as plane_cache

    return plane_cache().parent / f"kueue-{KUEUE_VERSION}"


def build() -> Path:
    """The kueue binary, built once (minutes) with `go install` at the pinned version."""
    from tests.kube.controlplane import Unavailable as PlaneUnavailable
    from tests.kube.controlplane import install_binary

    try:
        return install_binary(f"{KUEUE_MODULE}/cmd/kueue@{KUEUE_VERSION}", "kueue", cache_dir())
    except PlaneUnavailable as exc:
        raise Unavailable(str(exc)) from exc


def module_dir() -> Path:
    """The module's files in the Go module cache (downloaded if missing)."""
    from tests.kube.controlplane import go_binary

    go = go_binary()
    if go is None:
        raise Unavailable("Go is not installed (needed to find Kueue's module)")
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{KUEUE_MODULE}@{KUEUE_VERSION}"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tempfile.gettempdir(),
    )
    if result.returncode != 0:
        raise Unavailable(f"go mod download failed:\n{result.stderr[-2000:]}")
    return Path(json.loads(result.stdout)["Dir"])


def crds() -> list[dict[str, Any]]:
    bases = module_dir() / "config" / "components" / "crd" / "bases"
    return [
        doc
        for path in sorted(bases.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def install_crds(api_client: Any, timeout: float = 60.0) -> None:
    """Create the CRDs and wait until each is Established."""
    import time

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    ext = client.ApiextensionsV1Api(api_client)
    names = []
    for crd in crds():
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


# The queues --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TeamQuota:
    """One team's quota of one flavor, as gpuqueue's Quota row says it."""

    team: str  # the team's slug; its namespace is `namespace`
    namespace: str
    flavor: str
    resource: str  # e.g. nvidia.com/gpu
    guarantee: int
    limit: int
    weight: float = 1.0


def quotas_of(quota_rows: Iterable[Any]) -> list[TeamQuota]:
    """TeamQuota from gpuqueue's Quota rows (team, flavor, guarantee, limit, weight)."""
    return [
        TeamQuota(
            team=q.team.slug,
            namespace=q.team.namespace,
            flavor=q.flavor.name,
            resource=q.flavor.resource_name,
            guarantee=int(q.guarantee),
            limit=int(q.limit),
            weight=float(q.weight),
        )
        for q in quota_rows
    ]


def queue_objects(
    quotas: Sequence[TeamQuota], flavor_labels: Mapping[str, Mapping[str, str]]
) -> list[dict[str, Any]]:
    """ResourceFlavors (one per flavor, its node labels), then one ClusterQueue per team in the
    cohort COHORT, then a LocalQueue QUEUE in each team namespace. A team without quota of a
    flavor gets nominal quota 0 of it and may borrow nothing (gpuqueue admits nothing there)."""
    flavors = sorted({q.flavor for q in quotas})
    resources = sorted({q.resource for q in quotas})
    teams: dict[str, dict[str, TeamQuota]] = {}
    namespaces: dict[str, str] = {}
    for q in quotas:
        teams.setdefault(q.team, {})[q.flavor] = q
        namespaces[q.team] = q.namespace
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": API,
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": {"nodeLabels": dict(flavor_labels.get(name, {}))},
        }
        for name in flavors
    ]
    for team, by_flavor in sorted(teams.items()):
        weights = {q.weight for q in by_flavor.values()}
        groups = []
        for resource in resources:
            group_flavors = []
            for name in flavors:
                q = by_flavor.get(name)
                if q is not None and q.resource != resource:
                    continue
                if q is None and not any(
                    o.flavor == name and o.resource == resource for o in quotas
                ):
                    continue
                guarantee = q.guarantee if q else 0
                borrow = max(0, q.limit - q.guarantee) if q else 0
                group_flavors.append(
                    {
                        "name": name,
                        "resources": [
                            {
                                "name": resource,
                                "nominalQuota": str(guarantee),
                                "borrowingLimit": str(borrow),
                            }
                        ],
                    }
                )
            if group_flavors:
                groups.append({"coveredResources": [resource], "flavors": group_flavors})
        objects.append(
            {
                "apiVersion": API,
                "kind": "ClusterQueue",
                "metadata": {"name": team},
                "spec": {
                    "cohortName": COHORT,
                    "namespaceSelector": {},
                    "resourceGroups": groups,
                    # Kueue's weight is per queue; gpuqueue's per quota (the same here).
                    "fairSharing": {"weight": _quantity(max(weights))},
                    "preemption": {
                        "reclaimWithinCohort": "Any",
                        "withinClusterQueue": "LowerPriority",
                    },
                },
            }
        )
    for team in sorted(teams):
        objects.append(
            {
                "apiVersion": API,
                "kind": "LocalQueue",
                "metadata": {"name": QUEUE, "namespace": namespaces[team]},
                "spec": {"clusterQueue": team},
            }
        )
    return objects


def _quantity(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def create_objects(api_client: Any, objects: Sequence[Mapping[str, Any]]) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    for obj in objects:
        plural = obj["kind"].lower() + "s"
        namespace = obj["metadata"].get("namespace")
        if namespace:
            custom.create_namespaced_custom_object(
                "kueue.x-k8s.io", "v1beta2", namespace, plural, obj, _preload_content=False
            )
        else:
            custom.create_cluster_custom_object(
                "kueue.x-k8s.io", "v1beta2", plural, obj, _preload_content=False
            )


def job_manifest(
    name: str,
    namespace: str,
    workers: int,
    gpus: int,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    grace_seconds: int | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job for Kueue: created suspended with the queue label (what Kueue's webhook
    would make of it), `workers` pods of `gpus` GPUs each, all admitted as one Workload.
    `grace_seconds`: the pods' termination grace (what a preempted pod gets to save in)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: QUEUE, **labels},
        },
        "spec": {
            "suspend": True,
            "parallelism": workers,
            "completions": workers,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": dict(labels), "annotations": dict(annotations)},
                "spec": {
                    "restartPolicy": "Never",
                    **(
                        {"terminationGracePeriodSeconds": grace_seconds}
                        if grace_seconds is not None
                        else {}
                    ),
                    "containers": [
                        {
                            "name": "main",
                            "image": "ghcr.io/acme/train:1",
                            "resources": {
                                "requests": {"nvidia.com/gpu": str(gpus)},
                                "limits": {"nvidia.com/gpu": str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


# Running -----------------------------------------------------------------------------------


def configuration(webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """The manager's Configuration (config.kueue.x-k8s.io/v1beta2)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": "0"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        # The release's own defaults (config/components/manager), but no client-side rate
        # limit: gpuqueue has none either.
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "Cohort.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": -1, "burst": 1000},
        "integrations": {"frameworks": ["batch/job"]},
        # Kueue's documented default strategies, spelled out (the Configuration asks for them).
        "fairSharing": {
            "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
        },
    }


def self_signed(folder: Path) -> Path:
    """folder/tls.crt and tls.key for 127.0.0.1."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=kueue-webhook",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(folder / "tls.key"),
            "-out",
            str(folder / "tls.crt"),
        ],
        check=True,
        capture_output=True,
    )
    return folder


@dataclass
class Manager:
    """The kueue controller manager as a process; `pid` is the manager's own."""

    workdir: Path
    kubeconfig: Path
    binary: Path = field(default_factory=build)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Manager:
        from tests.kube.controlplane import free_port

        if shutil.which("unshare") is None:
            raise Unavailable("unshare (util-linux) is needed to give kueue its /etc overlay")
        self.workdir.mkdir(parents=True, exist_ok=True)
        webhook_certs = self_signed(self.workdir / "webhook-certs")
        upper, work = self.workdir / "etc-upper", self.workdir / "etc-work"
        metrics = upper / "kueue" / "metrics" / "certs"
        metrics.mkdir(parents=True, exist_ok=True)
        work.mkdir(exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(webhook_certs / name, metrics / name)
        config = self.workdir / "config.yaml"
        config.write_text(yaml.safe_dump(configuration(free_port(), webhook_certs)))
        script = (
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
            f' && exec "$0" "$@"'
        )
        log = open(self.workdir / "kueue.log", "ab")  # noqa: SIM115 - kept by the process
        self.process = subprocess.Popen(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                str(self.binary),
                f"--config={config}",
                "--feature-gates=VisibilityOnDemand=false",
                "--zap-log-level=info",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        return (self.workdir / "kueue.log").read_text(errors="replace")[-chars:]

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
    print(build())
