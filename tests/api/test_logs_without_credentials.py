"""A web process with the Kubernetes backend but no credentials (a pod whose ServiceAccount token
is not mounted, and no kubeconfig) answers a worker's log with a 503 that says so, not a 500."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuqueue.cluster import get_backend
from tests.api.test_logs import logs, start_job


@pytest.fixture
def no_credentials(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    settings.GPUQUEUE_CLUSTER_BACKEND = "kubernetes"
    settings.GPUQUEUE_K8S_KUBECONFIG = None
    # What load_incluster_config looks for: not in a pod, or in one without its token.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    get_backend.cache_clear()
    yield
    get_backend.cache_clear()


def test_a_log_asked_of_a_web_without_kubernetes_credentials_is_a_503_saying_so(
    api: Any, submit: Any, cluster_file: Path, no_credentials: Any
) -> None:
    job = start_job(submit(workers=1), cluster_file)
    response = logs(api, job.pk, worker=0)
    assert response.status_code == 503, response.content
    assert response.headers["Retry-After"] == "5"
    assert "no Kubernetes credentials to read logs with" in str(response.json())
