"""A process with the Kubernetes backend and nothing to reach the cluster with (not in a pod with
its ServiceAccount token, no kubeconfig, or one that is empty) gets the backend's own
`NoCredentials`, a permanent ClusterError with the client's sentence: callers above the backend
never see the Kubernetes client's exceptions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuqueue.cluster.base import ClusterError, NoCredentials
from gpuqueue.cluster.kubernetes import KubernetesBackend
from gpuqueue.cluster.lease import api_client_for


@pytest.fixture
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    # What load_incluster_config looks for.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)


def test_the_backend_without_credentials_says_so_in_its_own_error(
    db: Any, settings: Any, outside_a_pod: None, tmp_path: Path
) -> None:
    settings.GPUQUEUE_K8S_KUBECONFIG = None
    with pytest.raises(NoCredentials) as missing:
        KubernetesBackend.from_settings()
    assert isinstance(missing.value, ClusterError) and not missing.value.transient
    assert "Service host/port is not set" in str(missing.value)
    empty = tmp_path / "kubeconfig"
    empty.write_text("")
    settings.GPUQUEUE_K8S_KUBECONFIG = str(empty)
    with pytest.raises(NoCredentials, match="is empty"):
        KubernetesBackend.from_settings()


def test_the_lease_client_without_credentials_says_so_too(outside_a_pod: None) -> None:
    with pytest.raises(NoCredentials):
        api_client_for(None)
