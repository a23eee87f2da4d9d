"""Prometheus metrics at /metrics, correct with any number of web and worker processes.

1. Gauges (pending jobs and GPUs, allocation, fair share, quotas, capacity) are computed from
   PostgreSQL at scrape time by a custom collector: every process answers the same.
2. Counters (admitted, preempted, finished) are counts of JobEvent rows: the event table is
   already the durable, cross-process record of every transition.
3. Histograms (admission cycle duration, API latency) are observed in whichever process runs
   the work and accumulated in Redis hashes (`gpuqueue/ops/redis_histograms.py`: counted in memory,
   published at most once a second), then read back at scrape time. The cycle is timed by
   Celery signals around its task; the worker imports this module through CELERY_IMPORTS.

So every figure is the service's, not the process's: each web replica exports the same series,
and Prometheus keeps one copy per replica (labels `instance` and `pod`). A query takes one copy
before it aggregates: `sum(max without (instance, pod) (gpuqueue_pending_jobs))`, never
`sum(gpuqueue_pending_jobs)`, which counts every job once per replica. The shipped Grafana
dashboard does (tests/foundation/test_dashboard_replicas.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from celery import signals
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gpuqueue.ops.redis_histograms import RedisHistogram

log = logging.getLogger(__name__)

CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

# Hash keys end in :v2 since buckets are stored per bucket rather than cumulatively.
CYCLE_DURATION = RedisHistogram(
    "gpuqueue_admission_cycle_duration_seconds",
    "Admission cycle duration",
    "gpuqueue:metrics:cycle:v2",
    [],
    CYCLE_BUCKETS,
)
API_LATENCY = RedisHistogram(
    "gpuqueue_api_request_duration_seconds",
    "API request latency",
    "gpuqueue:metrics:api:v2",
    ["method", "route", "status"],
    API_BUCKETS,
)


def observe_cycle(seconds: float) -> None:
    # A few cycles a second at most, and a worker may sit idle after one: publish at once.
    CYCLE_DURATION.observe((), seconds, flush=True)


def observe_api(method: str, route: str, status: int, seconds: float) -> None:
    API_LATENCY.observe((method, route, f"{status // 100}xx"), seconds)


# The cycle runs in a Celery worker; time its task there.
_started: dict[str, float] = {}
CYCLE_TASK = "gpuqueue.run_admission_cycle"


@signals.task_prerun.connect
def _cycle_started(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if task is not None and task.name == CYCLE_TASK and task_id:
        _started[task_id] = time.perf_counter()


@signals.task_postrun.connect
def _cycle_finished(
    task_id: str | None = None, task: Any = None, retval: Any = None, **_: Any
) -> None:
    started = _started.pop(task_id or "", None)
    if started is None:
        return
    # A cycle that found another holding the lock did no work: not a cycle worth timing.
    if isinstance(retval, dict) and retval.get("ran") is False:
        return
    observe_cycle(time.perf_counter() - started)


# --- The collector ------------------------------------------------------------------------------


class QueueCollector:
    """Reads the database on every scrape (a handful of aggregate queries)."""

    def collect(self) -> Iterator[Metric]:
        from django.db.models import Count, F, Q, Sum

        from gpuqueue.core.states import FINAL, HOLDING, JobState
        from gpuqueue.models import Job, JobEvent
        from gpuqueue.ops.usage_metrics import usage_metrics
        from gpuqueue.services.cluster.inventory import usage_now

        usage = usage_now()
        pending_jobs = GaugeMetricFamily(
            "gpuqueue_pending_jobs", "Jobs waiting for admission", labels=["team", "flavor"]
        )
        pending_gpus = GaugeMetricFamily(
            "gpuqueue_pending_gpus", "GPUs asked for by pending jobs", labels=["team", "flavor"]
        )
        allocated = GaugeMetricFamily(
            "gpuqueue_allocated_gpus",
            "GPUs held by admitted, running and preempting jobs",
            labels=["team", "flavor"],
        )
        guarantee = GaugeMetricFamily(
            "gpuqueue_quota_guarantee_gpus", "Quota guarantee", labels=["team", "flavor"]
        )
        limit = GaugeMetricFamily(
            "gpuqueue_quota_limit_gpus", "Quota limit", labels=["team", "flavor"]
        )
        capacity = GaugeMetricFamily(
            "gpuqueue_capacity_gpus", "GPUs on ready nodes", labels=["flavor"]
        )
        schedulable = GaugeMetricFamily(
            "gpuqueue_schedulable_gpus", "GPUs on nodes open to new work", labels=["flavor"]
        )
        balance = GaugeMetricFamily(
            "gpuqueue_share_balance_gpu_hours",
            "Time-based fair share: GPU-hours of fair share owed to the team (negative: in "
            "debt), decayed; only teams with a kept balance",
            labels=["team", "flavor"],
        )
        fair_share = GaugeMetricFamily(
            "gpuqueue_fair_share_gpus",
            "What the last admission cycle entitled the team to: guarantee plus its weighted "
            "part of idle GPUs, capped by its limit (compare with gpuqueue_allocated_gpus)",
            labels=["team", "flavor"],
        )
        for f in usage:
            capacity.add_metric([f.flavor], f.capacity)
            schedulable.add_metric([f.flavor], f.schedulable_capacity)
            for t in f.teams:
                pending_jobs.add_metric([t.team, f.flavor], t.pending_jobs)
                pending_gpus.add_metric([t.team, f.flavor], t.pending_gpus)
                allocated.add_metric([t.team, f.flavor], t.allocated)
                if t.guarantee is not None:
                    guarantee.add_metric([t.team, f.flavor], t.guarantee)
                    limit.add_metric([t.team, f.flavor], t.limit or 0)
                if t.share_balance_gpu_hours is not None:
                    balance.add_metric([t.team, f.flavor], t.share_balance_gpu_hours)
                if t.fair_share is not None:
                    fair_share.add_metric([t.team, f.flavor], t.fair_share)
        yield from (pending_jobs, pending_gpus, allocated, guarantee, limit, capacity, schedulable)
        yield from (balance, fair_share)

        # Counters from the event table: every transition is a row.
        admitted = CounterMetricFamily(
            "gpuqueue_jobs_admitted",
            "Admissions (a requeued job counts again)",
            labels=["team", "flavor"],
        )
        preempted = CounterMetricFamily(
            "gpuqueue_jobs_preempted", "Preemptions", labels=["team", "flavor"]
        )
        finished = CounterMetricFamily(
            "gpuqueue_jobs_finished",
            "Jobs that reached a final state",
            labels=["team", "flavor", "state"],
        )
        rows = (
            JobEvent.objects.filter(
                Q(to_state=JobState.ADMITTED)
                # PREEMPTING -> PREEMPTING is a checkpoint acknowledgement, not a preemption.
                | Q(
                    to_state=JobState.PREEMPTING,
                    from_state__in=[JobState.ADMITTED, JobState.RUNNING],
                )
                | Q(to_state__in=[s.value for s in FINAL])
            )
            .values("job__team__slug", "job__flavor__name", "to_state")
            .annotate(n=Count("id"))
            .order_by()
        )
        for row in rows:
            labels = [row["job__team__slug"], row["job__flavor__name"]]
            if row["to_state"] == JobState.ADMITTED:
                admitted.add_metric(labels, row["n"])
            elif row["to_state"] == JobState.PREEMPTING:
                preempted.add_metric(labels, row["n"])
            else:
                finished.add_metric([*labels, row["to_state"]], row["n"])
        yield from (admitted, preempted, finished)
        submitted = CounterMetricFamily(
            "gpuqueue_jobs_submitted", "Jobs submitted", labels=["team", "flavor"]
        )
        for row in (
            Job.objects.values("team__slug", "flavor__name").annotate(n=Count("id")).order_by()
        ):
            submitted.add_metric([row["team__slug"], row["flavor__name"]], row["n"])
        yield submitted
        held = Job.objects.filter(state__in=HOLDING).aggregate(
            gpus=Sum(F("workers") * F("gpus_per_worker"))
        )
        yield GaugeMetricFamily(
            "gpuqueue_allocated_gpus_total",
            "GPUs held by gpuqueue jobs, all flavors",
            value=float(held["gpus"] or 0),
        )
        yield from usage_metrics()
        yield CYCLE_DURATION.collect()
        yield API_LATENCY.collect()


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The scrape endpoint: with GPUQUEUE_METRICS_TOKEN set, a matching Bearer token is needed;
    without one, only GPUQUEUE_METRICS_OPEN (the embedded mode's default) lets anyone read it
    (the figures are aggregates, but they name teams and show their load)."""
    token = getattr(settings, "GPUQUEUE_METRICS_TOKEN", None)
    if token:
        import hmac

        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return HttpResponse("metrics token required\n", status=401, content_type="text/plain")
    elif not settings.GPUQUEUE_METRICS_OPEN:
        return HttpResponse(
            "set GPUQUEUE_METRICS_TOKEN (or GPUQUEUE_METRICS_OPEN=true) to scrape /metrics\n",
            status=401,
            content_type="text/plain",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector())  # type: ignore[arg-type]
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


class ApiLatencyMiddleware:
    """Times every /api/ request and records it by route (the URL pattern, not the path, so
    that job ids do not explode the label set)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "unmatched"
        route = route.replace("^", "").replace("$", "")  # router patterns are regexes
        observe_api(
            request.method or "GET", route, response.status_code, time.perf_counter() - started
        )
        return response
