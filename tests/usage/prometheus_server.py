"""Two servers for the Prometheus reader's tests: a DCGM exporter stand-in (the exposition
format, as Prometheus scrapes it) and a real Prometheus: Debian's package where installed (`make
test` installs it), else built once from its Go module and cached."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.kube.controlplane import install_binary

PROMETHEUS_VERSION = "v0.316.0"  # Prometheus 3.x's Go module version
PROMETHEUS_PACKAGE = f"github.com/prometheus/prometheus/cmd/prometheus@{PROMETHEUS_VERSION}"


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpuqueue" / f"prometheus-{PROMETHEUS_VERSION}"


def prometheus_binary() -> Path:
    """Debian's `prometheus` if installed; else built once with `go install` (minutes on two
    cores), then reused; Unavailable without Go."""
    installed = shutil.which("prometheus")
    if installed:
        return Path(installed)
    return install_binary(PROMETHEUS_PACKAGE, "prometheus", cache_dir())


def dcgm_exposition(gpus: list[tuple[str, str, int, float]]) -> str:
    """The DCGM exporter's text for (namespace, pod, GPU index, utilization %) series."""
    lines = [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ]
    for namespace, pod, gpu, value in gpus:
        lines.append(
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",UUID="GPU-{pod}-{gpu}",device="nvidia{gpu}",'
            f'modelName="NVIDIA H100 80GB HBM3",Hostname="h100-0",container="worker",'
            f'namespace="{namespace}",pod="{pod}"}} {value}'
        )
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def serve(handler_body: object) -> Iterator[str]:
    """A local HTTP server whose GET answers `handler_body(path) -> (status, type, bytes)`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            status, content_type, body = handler_body(self.path)  # type: ignore[operator]
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def prometheus(target: str) -> Iterator[str]:
    """A real Prometheus scraping `target` (host:port) every second; yields its URL once it
    has scraped the target at least once."""
    binary = prometheus_binary()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: dcgm\n"
            "    honor_labels: true\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n"
        )
        process = subprocess.Popen(
            [
                str(binary),
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
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    query = "/api/v1/query?query=up%3D%3D1"
                    with urllib.request.urlopen(url + query, timeout=2) as r:
                        if b'"value"' in r.read():
                            break
                time.sleep(0.5)
            else:
                raise RuntimeError("Prometheus never scraped its target")
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)
