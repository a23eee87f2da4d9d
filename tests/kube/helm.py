"""Helm, built once from its Go module (as the control plane is: no registry, no download of a
binary), and the chart of deploy/helm rendered with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.kube.controlplane import KUBE_VERSION, Unavailable, cache_dir, go_binary, install_binary

HELM_VERSION = "v3.19.0"
# The control plane of these tests (controlplane.KUBE_VERSION) and the chart's minimum.
NEWEST_KUBERNETES = KUBE_VERSION
MINIMUM_KUBERNETES = "v1.30.0"
CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpuqueue"
# The Prometheus Operator whose ServiceMonitor CRD the chart's `metrics.serviceMonitor` needs.
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_VERSION = "v0.85.0"
SERVICE_MONITOR_CRD = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"


def helm_binary() -> Path:
    """~/.cache/gpuqueue/helm-<version>/helm (beside the control plane's binaries), built with
    `go install` when missing."""
    return install_binary(
        f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}",
        "helm",
        cache_dir().parent / f"helm-{HELM_VERSION}",
    )


def service_monitor_crd() -> dict[str, Any]:
    """The ServiceMonitor CustomResourceDefinition as the Prometheus Operator publishes it, from
    its Go module (`go mod download`, through the Go module proxy), cached in
    ~/.cache/gpuqueue/prometheus-operator-<version>/."""
    target = cache_dir().parent / f"prometheus-operator-{PROMETHEUS_OPERATOR_VERSION}"
    crd = target / Path(SERVICE_MONITOR_CRD).name
    if not crd.is_file():
        go = go_binary()
        if go is None:
            raise Unavailable("Go is not installed (needed once to fetch the ServiceMonitor CRD)")
        module = f"{PROMETHEUS_OPERATOR}@{PROMETHEUS_OPERATOR_VERSION}"
        with tempfile.TemporaryDirectory() as outside_any_module:
            done = subprocess.run(
                [go, "mod", "download", "-json", module],
                cwd=outside_any_module,
                env={**os.environ, "GOFLAGS": "-mod=mod"},
                capture_output=True,
                text=True,
                timeout=300,
            )
        found = json.loads(done.stdout or "{}")
        if done.returncode != 0 or "Dir" not in found:
            raise Unavailable(
                f"go mod download {module} failed: {found.get('Error') or done.stderr}"
            )
        target.mkdir(parents=True, exist_ok=True)
        staging = target / f".{crd.name}.{os.getpid()}"
        shutil.copyfile(Path(found["Dir"]) / SERVICE_MONITOR_CRD, staging)
        staging.rename(crd)  # whole or absent
    return yaml.safe_load(crd.read_text())


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 or not check, done.stderr
    return done


def render(
    *sets: str,
    namespace: str = "gpuqueue",
    release: str = "gpuqueue",
    kube_version: str = NEWEST_KUBERNETES,
) -> list[dict[str, Any]]:
    """`helm template` of the chart for a cluster of `kube_version`: its objects, hooks
    included."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += ["--kube-version", kube_version]
    for item in sets:
        args += ["--set", item]
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]
