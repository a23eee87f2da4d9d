"""The GPU-hours ledger and idle GPUs in /metrics: counters of the ledger's totals (durable and
the same from every process, as the event counters are) and gauges of jobs flagged idle."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, F, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpuqueue.core.states import JobState
from gpuqueue.models import JobActivity, UsageTotal

LABELS = ["team", "flavor"]


def usage_metrics() -> Iterator[Metric]:
    held = CounterMetricFamily(
        "gpuqueue_gpu_seconds_held",
        "GPU-seconds held by jobs from admission to release (the usage ledger; running jobs "
        "up to the last minute)",
        labels=LABELS,
    )
    preempted = CounterMetricFamily(
        "gpuqueue_gpu_seconds_preempted",
        "GPU-seconds held by attempts that ended in a preemption (lost unless checkpointed)",
        labels=LABELS,
    )
    idle = CounterMetricFamily(
        "gpuqueue_gpu_seconds_idle",
        "GPU-seconds held below the flavor's idle threshold, where utilization is known",
        labels=LABELS,
    )
    # The ledger's totals, kept by triggers in a few rows (one per team and flavor, plus the
    # last minute's parts): a scrape's cost does not grow with the ledger's history.
    for row in (
        UsageTotal.objects.values("team__slug", "flavor__name")
        .annotate(
            s=Sum("gpu_seconds"),
            lost=Sum("preempted_gpu_seconds"),
            idle=Sum("idle_gpu_seconds"),
        )
        .order_by()
    ):
        labels = [row["team__slug"], row["flavor__name"]]
        # Sums of differences carry float noise (1e-12): rounded to a millisecond, a counter
        # does not wobble below its last value, which rate() would read as a reset.
        held.add_metric(labels, round(row["s"] or 0.0, 3))
        preempted.add_metric(labels, round(row["lost"] or 0.0, 3))
        idle.add_metric(labels, round(row["idle"] or 0.0, 3))
    yield from (held, preempted, idle)

    idle_jobs = GaugeMetricFamily(
        "gpuqueue_idle_jobs", "Running jobs flagged idle (GPUs below threshold)", labels=LABELS
    )
    idle_gpus = GaugeMetricFamily(
        "gpuqueue_idle_gpus", "GPUs held by running jobs flagged idle", labels=LABELS
    )
    for row in (
        JobActivity.objects.filter(idle=True, job__state=JobState.RUNNING)
        .values("job__team__slug", "job__flavor__name")
        .annotate(n=Count("job_id"), gpus=Sum(F("job__workers") * F("job__gpus_per_worker")))
        .order_by()
    ):
        labels = [row["job__team__slug"], row["job__flavor__name"]]
        idle_jobs.add_metric(labels, row["n"])
        idle_gpus.add_metric(labels, row["gpus"] or 0)
    yield from (idle_jobs, idle_gpus)
