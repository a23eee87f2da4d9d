"""Per-job GPU utilization from the DCGM exporter's metrics, through Prometheus's HTTP API
(`GET /api/v1/query`). Standard library only: one instant query per sampling minute.

The exporter labels each GPU's series with the pod that holds it (`pod` and `namespace`, or
`exported_pod` and `exported_namespace` when Prometheus scraped it without honoring its
labels); gpuqueue's pods are named after their workload, `gq-<job>-<attempt>-…`.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from dataclasses import dataclass

POD_NAME = re.compile(r"^gq-(\d+)-(\d+)-")
# DCGM_FI_PROF_* are ratios (0..1); DCGM_FI_DEV_GPU_UTIL is a percentage.
RATIO_METRICS = ("DCGM_FI_PROF_",)


class PrometheusError(Exception):
    """Prometheus could not be read (unreachable, slow, an error status or an odd body)."""


@dataclass(frozen=True, slots=True)
class PodGpu:
    namespace: str
    job_id: int
    attempt: int
    percent: float


def query(url: str, promql: str, timeout: float) -> list[dict]:
    """The result of an instant query (resultType vector), or PrometheusError."""
    address = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(address, timeout=timeout) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error", "")
        except (ValueError, AttributeError):
            detail = ""
        raise PrometheusError(f"Prometheus answered {exc.code}: {detail}".strip()) from None
    except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
        raise PrometheusError(f"cannot read Prometheus at {url}: {exc}") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        raise PrometheusError(f"Prometheus query failed: {str(body)[:200]}")
    data = body.get("data") or {}
    if data.get("resultType") != "vector":
        raise PrometheusError(f"expected a vector, got {data.get('resultType')!r}")
    return list(data.get("result") or [])


def gpu_series(result: list[dict], metric: str) -> list[PodGpu]:
    """One entry per GPU series held by a gpuqueue pod; others are left out."""
    scale = 100.0 if metric.startswith(RATIO_METRICS) else 1.0
    out = []
    for series in result:
        labels = series.get("metric") or {}
        pod = labels.get("exported_pod") or labels.get("pod") or ""
        namespace = labels.get("exported_namespace") or labels.get("namespace") or ""
        match = POD_NAME.match(pod)
        try:
            value = float(series["value"][1]) * scale
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if match and value == value:  # NaN: a GPU without a reading
            out.append(PodGpu(namespace, int(match[1]), int(match[2]), value))
    return out


def job_utilization(url: str, metric: str, timeout: float) -> dict[tuple[str, int, int], float]:
    """{(namespace, job id, attempt): mean utilization percent over its GPUs}."""
    per_job: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for gpu in gpu_series(query(url, metric, timeout), metric):
        per_job[(gpu.namespace, gpu.job_id, gpu.attempt)].append(gpu.percent)
    return {key: sum(values) / len(values) for key, values in per_job.items()}
