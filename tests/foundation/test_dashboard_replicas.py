"""The Grafana dashboard shows the same figures whatever the number of web replicas.

Every series of /metrics is the service's (PostgreSQL or Redis read at scrape time), so each web
replica exports the same copy. Two real Prometheus servers scrape gpuqueue's real /metrics, one
as one replica and one as two (the same answer at two addresses, as two pods give it), and every
panel's query must give both the same result.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from tests.kube.controlplane import Unavailable
from tests.usage.prometheus_server import free_port, prometheus_binary, serve

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "base" / "grafana-dashboard.json"


def panel_queries() -> list[str]:
    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                yield node["expr"]
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    return list(walk(json.loads(DASHBOARD.read_text())))


@contextlib.contextmanager
def prometheus_scraping(targets: list[str]) -> Iterator[str]:
    """A real Prometheus scraping `targets` (host:port) every second, each target labelled as
    the ServiceMonitor labels a pod; yields its URL once every target was scraped twice."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "prometheus.yml"
        static = ", ".join(
            f"{{targets: ['{t}'], labels: {{pod: 'gpuqueue-web-{i}'}}}}"
            for i, t in enumerate(targets)
        )
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: gpuqueue\n"
            f"    static_configs: [{static}]\n"
        )
        process = subprocess.Popen(
            [
                str(prometheus_binary()),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp}/data",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while query(url, "count(count_over_time(up[1m]) >= 2)") != [({}, str(len(targets)))]:
                if time.monotonic() > deadline:
                    raise RuntimeError("Prometheus never scraped its targets")
                time.sleep(0.5)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)


def query(url: str, expr: str, at: float | None = None) -> list[tuple[dict[str, str], str]]:
    params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    try:
        with urllib.request.urlopen(
            f"{url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=5
        ) as r:
            body = json.loads(r.read())
    except OSError:
        return []
    result = body["data"]["result"]
    if body["data"]["resultType"] == "scalar":
        return [({}, result[1])]
    return sorted(
        ((s["metric"], s["value"][1]) for s in result), key=lambda p: sorted(p[0].items())
    )


def test_every_panel_shows_the_same_figures_with_two_web_replicas_as_with_one(
    settings: Any, backend: Any, submit: Any
) -> None:
    try:
        prometheus_binary()
    except Unavailable as exc:
        pytest.skip(f"no Prometheus here: {exc}")
    settings.GPUQUEUE_METRICS_OPEN = True
    settings.GPUQUEUE_METRICS_TOKEN = None
    sync_cluster(backend)  # the nodes: capacity
    for gpus in (8, 8, 4):
        submit(workers=1, gpus_per_worker=gpus)
    submit(workers=4, gpus_per_worker=8)  # the other team's guarantee is left: it waits
    run_cycle(backend=backend)
    response = Client().get("/metrics")
    assert response.status_code == 200
    body = response.content

    def answer(path: str) -> tuple[int, str, bytes]:
        return 200, "text/plain; version=0.0.4", body

    with (
        serve(answer) as a,
        serve(answer) as b,
        prometheus_scraping([a.removeprefix("http://")]) as one,
        prometheus_scraping([a.removeprefix("http://"), b.removeprefix("http://")]) as two,
    ):
        time.sleep(2)  # a rate wants two samples of each target before `at`
        at = time.time()
        compared = 0
        for expr in panel_queries():
            assert query(two, expr, at) == query(one, expr, at), expr
            compared += any(v not in ("0", "NaN") for _, v in query(one, expr, at))
        # The gauges panels show something to compare (rates of an unchanging counter are 0).
        assert compared >= 8
        pending = query(one, "sum(gpuqueue_pending_jobs)", at)
        assert pending and float(pending[0][1]) >= 1
        assert query(two, "sum(gpuqueue_pending_jobs)", at) != pending  # what a sum would show


pytestmark = pytest.mark.slow
