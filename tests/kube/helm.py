"""Helm, built once from its Go module (as the control plane is: no registry, no download of a
binary), and the chart of deploy/helm rendered with it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.kube.controlplane import KUBE_VERSION, cache_dir, install_binary

HELM_VERSION = "v3.19.0"
# The control plane of these tests (controlplane.KUBE_VERSION) and the chart's minimum.
NEWEST_KUBERNETES = KUBE_VERSION
MINIMUM_KUBERNETES = "v1.30.0"
CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpuqueue"


def helm_binary() -> Path:
    """~/.cache/gpuqueue/helm-<version>/helm (beside the control plane's binaries), built with
    `go install` when missing."""
    return install_binary(
        f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}",
        "helm",
        cache_dir().parent / f"helm-{HELM_VERSION}",
    )


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
