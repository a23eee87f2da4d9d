"""Idle GPUs found: each running job's GPU utilization, every minute, and a flag on a job whose
GPUs stayed below its flavor's threshold for its minutes (docs/architecture.md, scenario 3).

1. Read utilization per running job: from Prometheus (the DCGM exporter's metrics) when
   GPUQUEUE_PROMETHEUS_URL is set, else, in the simulated cluster, from each job's
   gpuqueue.dev/sim-gpu-utilization profile. A source that fails is logged and the minute
   skipped: flags and the ledger keep their last values.
2. Per job: since when it is below the threshold and whether that is long enough (JobActivity).
3. In the ledger's row of the attempt's current hour: GPU-seconds used (held × utilization)
   and GPU-seconds held below the threshold since the previous reading, so that reports show
   used and idle GPU-hours next to held ones.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from gpuqueue.cluster.prometheus import PrometheusError, job_utilization
from gpuqueue.core.gpu_idle import (
    PROFILE_ANNOTATION,
    IdleRule,
    below_since,
    idle_words,
    is_idle,
    profile_utilization,
)
from gpuqueue.core.states import JobState
from gpuqueue.core.usage_hours import hour_of
from gpuqueue.models import Flavor, Job, JobActivity, UsageRecord

log = logging.getLogger(__name__)
# A gap longer than this between two readings (the service was down) counts only this much.
MAX_GAP = timedelta(minutes=5)


def rule_for(flavor: Flavor) -> IdleRule:
    threshold = flavor.idle_threshold_percent
    return IdleRule(
        settings.GPUQUEUE_IDLE_THRESHOLD_PERCENT if threshold is None else threshold,
        flavor.idle_minutes or settings.GPUQUEUE_IDLE_MINUTES,
    )


def read_utilization(jobs: list[Job], now: datetime) -> tuple[dict[int, float], str]:
    """{job id: percent} for the jobs whose utilization is known, and its source."""
    if settings.GPUQUEUE_PROMETHEUS_URL:
        by_pod = job_utilization(
            settings.GPUQUEUE_PROMETHEUS_URL,
            settings.GPUQUEUE_PROMETHEUS_GPU_METRIC,
            settings.GPUQUEUE_PROMETHEUS_TIMEOUT_SECONDS,
        )
        found = {
            job.pk: by_pod[key]
            for job in jobs
            if (key := (job.team.namespace, job.pk, job.attempts)) in by_pod
        }
        return found, "prometheus"
    if settings.GPUQUEUE_CLUSTER_BACKEND != "simulated":
        return {}, ""
    found = {}
    for job in jobs:
        profile = (job.annotations or {}).get(PROFILE_ANNOTATION)
        started = job.started_at or job.admitted_at
        if profile and started:
            value = profile_utilization(profile, now - started)
            if value is not None:
                found[job.pk] = value
    return found, "simulated"


def sample_gpu_activity(now: datetime | None = None) -> int:
    """One minute's readings (the module docstring); returns how many jobs were read."""
    now = now or timezone.now()
    jobs = list(
        Job.objects.filter(state=JobState.RUNNING).select_related("team", "flavor").order_by("id")
    )
    try:
        readings, source = read_utilization(jobs, now)
    except PrometheusError as exc:
        log.warning("GPU utilization not read this minute: %s", exc)
        return 0
    previous = {a.job_id: a for a in JobActivity.objects.filter(job_id__in=list(readings))}
    activities, spans = [], []
    for job in jobs:
        if job.pk not in readings:
            continue
        percent, rule = readings[job.pk], rule_for(job.flavor)
        before = previous.get(job.pk)
        if before is not None and before.attempt != job.attempts:
            before = None  # a new attempt starts afresh
        since = below_since(before.below_since if before else None, percent, rule, now)
        activities.append(
            JobActivity(
                job_id=job.pk,
                attempt=job.attempts,
                gpu_utilization=percent,
                measured_at=now,
                source=source,
                below_since=since,
                idle=is_idle(since, rule, now),
            )
        )
        if before is None or now <= before.measured_at:
            continue  # the first reading of an attempt, or a repeated minute: no span
        # GPU-seconds as the ledger counts them: a fractional job its thousandths.
        seconds = min(now - before.measured_at, MAX_GAP).total_seconds() * job.gpu_share
        idle = seconds if percent < rule.threshold_percent else 0.0
        spans.append((job.pk, job.attempts, seconds * percent / 100, idle))
    with transaction.atomic():
        # A job that stopped running loses its reading: a flag belongs to a running attempt.
        JobActivity.objects.exclude(job__state__in=(JobState.RUNNING, JobState.PREEMPTING)).delete()
        JobActivity.objects.bulk_create(
            activities,
            update_conflicts=True,
            unique_fields=["job"],
            update_fields=[
                "attempt",
                "gpu_utilization",
                "measured_at",
                "source",
                "below_since",
                "idle",
            ],
        )
        add_to_ledger(spans, hour_of(now))
    return len(readings)


def add_to_ledger(spans: list[tuple[int, int, float, float]], hour: datetime) -> None:
    """Add (job id, attempt, used GPU-seconds, idle GPU-seconds) to the attempts' rows of
    `hour`, in one statement for every running job (increments: the sampler owns them)."""
    if not spans:
        return
    job_ids, attempts, used, idle = (list(column) for column in zip(*spans, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {UsageRecord._meta.db_table} AS u "
            "SET used_gpu_seconds = COALESCE(u.used_gpu_seconds, 0) + s.used, "
            "idle_gpu_seconds = u.idle_gpu_seconds + s.idle "
            "FROM unnest(%s::bigint[], %s::integer[], %s::float8[], %s::float8[]) "
            "AS s(job_id, attempt, used, idle) "
            "WHERE u.job_id = s.job_id AND u.attempt = s.attempt AND u.hour = %s",
            [job_ids, attempts, used, idle, hour],
        )


@dataclass(frozen=True)
class IdleFinding:
    gpu_utilization: float
    measured_at: datetime
    below_since: datetime | None
    idle: bool
    message: str


def finding_for(job: Job, now: datetime | None = None) -> IdleFinding | None:
    """What a job's page and the API say about its GPU activity (None when unknown or the job
    no longer holds GPUs)."""
    return findings_for([job], now).get(job.pk)


def findings_for(jobs: list[Job], now: datetime | None = None) -> dict[int, IdleFinding]:
    """`finding_for` of each of these jobs in one query (a page of the job list)."""
    measured = [job for job in jobs if job.state in (JobState.RUNNING, JobState.PREEMPTING)]
    if not measured:
        return {}
    activities = JobActivity.objects.in_bulk([job.pk for job in measured], field_name="job_id")
    findings = {}
    for job in measured:
        activity = activities.get(job.pk)
        if activity is not None and activity.attempt == job.attempts:
            findings[job.pk] = finding_of(job, activity, now)
    return findings


def finding_of(job: Job, activity: JobActivity, now: datetime | None = None) -> IdleFinding:
    now = now or timezone.now()
    rule = rule_for(job.flavor)
    if activity.idle and activity.below_since is not None:
        message = idle_words(job.gpus, rule.threshold_percent, activity.below_since, now)
    else:
        message = f"GPU utilization {activity.gpu_utilization:.0f} %"
    return IdleFinding(
        activity.gpu_utilization, activity.measured_at, activity.below_since, activity.idle, message
    )


def idle_job_ids(job_ids: list[int]) -> set[int]:
    """Which of these jobs are flagged idle now (for the job list's marker)."""
    return set(
        JobActivity.objects.filter(
            job_id__in=job_ids, idle=True, job__state=JobState.RUNNING
        ).values_list("job_id", flat=True)
    )
