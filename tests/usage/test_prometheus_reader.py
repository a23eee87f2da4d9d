"""The Prometheus reader (gpuqueue/cluster/prometheus.py): against a real Prometheus scraping
DCGM-format metrics when one can be built here, and always against a server answering the
shapes Prometheus's HTTP API documents (success, an error status, a slow or absent server)."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from gpuqueue.cluster.prometheus import PrometheusError, job_utilization, query
from gpuqueue.core.states import JobState
from gpuqueue.models import JobActivity
from gpuqueue.services.accounting.gpu_activity import sample_gpu_activity
from gpuqueue.services.jobs.admissions import Admitted, admit_all
from gpuqueue.services.jobs.transitions import transition
from tests.kube.controlplane import Unavailable
from tests.usage.prometheus_server import dcgm_exposition, prometheus, serve

METRIC = "DCGM_FI_DEV_GPU_UTIL"


def _series(labels: dict[str, str], value: str) -> dict[str, Any]:
    return {"metric": {"__name__": METRIC, **labels}, "value": [1767225600.0, value]}


# What Prometheus answers to /api/v1/query for DCGM_FI_DEV_GPU_UTIL (docs: "Instant queries",
# "Expression query result formats"): one series per GPU.
VECTOR = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [
            _series({"gpu": "0", "namespace": "team-a", "pod": "gq-7-2-0-x7k2p"}, "4"),
            _series({"gpu": "1", "namespace": "team-a", "pod": "gq-7-2-1-q9z8m"}, "2"),
            # Scraped without honor_labels: the pod's labels are exported_*.
            _series(
                {
                    "gpu": "0",
                    "namespace": "gpu-operator",
                    "pod": "dcgm-exporter-abc",
                    "exported_namespace": "team-b",
                    "exported_pod": "gq-9-1-0-aaaaa",
                },
                "97",
            ),
            _series({"gpu": "3", "namespace": "other", "pod": "jupyter-0"}, "50"),  # not ours
            _series({"gpu": "4", "namespace": "team-a", "pod": "gq-8-1-0-zzzzz"}, "NaN"),
        ],
    },
}


def _json(status: int, body: Any) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(body).encode()


def test_per_job_means_over_its_gpus_by_namespace_pod_and_attempt() -> None:
    with serve(lambda path: _json(200, VECTOR)) as url:
        got = job_utilization(url, METRIC, timeout=2)
    assert got == {("team-a", 7, 2): 3.0, ("team-b", 9, 1): 97.0}


def test_a_ratio_metric_is_read_as_percent() -> None:
    body = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [_series({"namespace": "team-a", "pod": "gq-7-2-0-x"}, "0.25")],
        },
    }
    with serve(lambda path: _json(200, body)) as url:
        assert job_utilization(url, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", 2) == {("team-a", 7, 2): 25.0}


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (
            _json(400, {"status": "error", "errorType": "bad_data", "error": "parse error"}),
            "400: parse error",
        ),
        (
            _json(503, {"status": "error", "errorType": "unavailable", "error": "shutting down"}),
            "503",
        ),
        ((200, "text/html", b"<html>a proxy's login page</html>"), "cannot read"),
        (
            _json(200, {"status": "success", "data": {"resultType": "matrix", "result": []}}),
            "expected a vector",
        ),
    ],
)
def test_errors_are_reported_as_prometheus_errors(answer: Any, words: str) -> None:
    with serve(lambda path: answer) as url, pytest.raises(PrometheusError, match=words):
        query(url, METRIC, timeout=2)


def test_a_slow_or_absent_server_times_out_as_an_error() -> None:
    def slow(path: str) -> Any:
        time.sleep(1.5)
        return _json(200, VECTOR)

    with serve(slow) as url, pytest.raises(PrometheusError, match="cannot read"):
        query(url, METRIC, timeout=0.3)
    with pytest.raises(PrometheusError, match="cannot read"):
        query("http://127.0.0.1:9", METRIC, timeout=1)


@pytest.fixture
def running_job(world: Any, submit: Any) -> Any:
    job = submit(workers=2, gpus_per_worker=1)
    admit_all([Admitted(job.pk, {"h100-0": 2}, False)], timezone.now(), "cycle")
    job.refresh_from_db()
    transition(job, JobState.RUNNING, reason="running", actor="test", started_at=timezone.now())
    return job


def test_the_sampler_reads_prometheus_and_survives_its_failure(
    running_job: Any, settings: Any, caplog: Any
) -> None:
    body = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                _series({"namespace": "team-a", "pod": f"gq-{running_job.pk}-1-{i}-x"}, "1")
                for i in range(2)
            ],
        },
    }
    settings.GPUQUEUE_IDLE_MINUTES = 1
    now = timezone.now()
    with serve(lambda path: _json(200, body)) as url:
        settings.GPUQUEUE_PROMETHEUS_URL = url
        assert sample_gpu_activity(now) == 1
        assert sample_gpu_activity(now + timedelta(minutes=1)) == 1
    activity = JobActivity.objects.get(job_id=running_job.pk)
    assert (activity.source, activity.gpu_utilization, activity.idle) == ("prometheus", 1.0, True)
    with serve(lambda path: _json(503, {"status": "error", "error": "down"})) as url:
        settings.GPUQUEUE_PROMETHEUS_URL = url
        assert sample_gpu_activity(now + timedelta(minutes=2)) == 0  # not fatal
    assert "GPU utilization not read this minute: Prometheus answered 503" in caplog.text
    assert JobActivity.objects.get(job_id=running_job.pk).measured_at == now + timedelta(minutes=1)


@pytest.mark.slow
def test_against_a_real_prometheus_scraping_dcgm_metrics() -> None:
    exposition = dcgm_exposition(
        [
            ("team-a", "gq-7-2-0-x7k2p", 0, 4.0),
            ("team-a", "gq-7-2-1-q9z8m", 1, 2.0),
            ("team-b", "gq-9-1-0-aaaaa", 0, 97.0),
            ("other", "jupyter-0", 3, 50.0),
        ]
    ).encode()
    with serve(lambda path: (200, "text/plain; version=0.0.4", exposition)) as target:
        try:
            with prometheus(target.removeprefix("http://")) as url:
                assert job_utilization(url, METRIC, timeout=5) == {
                    ("team-a", 7, 2): 3.0,
                    ("team-b", 9, 1): 97.0,
                }
                with pytest.raises(PrometheusError, match="400"):
                    query(url, "DCGM_FI_DEV_GPU_UTIL{", timeout=5)
        except Unavailable as exc:
            pytest.skip(f"no Prometheus here: {exc}")
