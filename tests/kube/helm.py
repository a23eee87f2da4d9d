"""Helm, built once from its Go module (as the control plane is: no registry, no download of a
binary), and the chart of deploy/helm rendered with it."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.kube.controlplane import Unavailable, go_binary

HELM_VERSION = "v3.19.0"
# The control plane of these tests (controlplane.KUBE_VERSION) and the chart's minimum.
NEWEST_KUBERNETES = "v1.34.4"
MINIMUM_KUBERNETES = "v1.30.0"
CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gpuqueue"


def helm_binary() -> Path:
    """~/.cache/gpuqueue/helm-<version>/helm, built with `go install` when missing."""
    target = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpuqueue"
    target = target / f"helm-{HELM_VERSION}"
    helm = target / "helm"
    if helm.is_file():
        return helm
    go = go_binary()
    if go is None:
        raise Unavailable("Go is not installed (needed once to build helm)")
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if helm.is_file():
            return helm
        staging = Path(tempfile.mkdtemp(prefix="build-", dir=target))
        try:
            done = subprocess.run(
                [
                    go,
                    "install",
                    "-trimpath",
                    "-ldflags",
                    "-s -w",
                    f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}",
                ],
                cwd=staging,
                env={
                    **os.environ,
                    "GOBIN": str(staging),
                    "GOFLAGS": "-mod=mod",
                    "GOCACHE": str(staging / "go-build"),
                },
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise Unavailable(f"building helm failed: {done.stderr[-2000:]}")
            (staging / "helm").rename(helm)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return helm


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
