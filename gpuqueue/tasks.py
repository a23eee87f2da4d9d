"""Celery entry points: short, named, primitive arguments, retried only on transient errors.

The demo's traffic has its task with the demo (gpuqueue/demo/tasks.py). No task follows the
cluster: only the watcher (the leader of its Lease) does, from its own live copy."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError
from django.utils import timezone

from gpuqueue.cycle.run import refresh_forecasts_when_due, run_cycle
from gpuqueue.services.accounting.gpu_activity import sample_gpu_activity
from gpuqueue.services.accounting.usage_ledger import fold_usage_totals, record_open_attempts

# Every task that reads and writes the database: acknowledged after it ran (a worker killed
# mid-task leaves it queued), and retried with backoff when PostgreSQL is briefly away.
RETRY_ON_DATABASE_ERRORS = {
    "acks_late": True,
    "ignore_result": True,
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "max_retries": 3,
}


@shared_task(
    name="gpuqueue.run_admission_cycle",
    **RETRY_ON_DATABASE_ERRORS,
)
def run_admission_cycle() -> dict[str, object]:
    result = run_cycle()
    return {"ran": result.ran, "admitted": result.admitted, "preempted": result.preempted}


@shared_task(
    name="gpuqueue.refresh_forecasts",
    **RETRY_ON_DATABASE_ERRORS,
)
def refresh_forecasts_task() -> int | None:
    return refresh_forecasts_when_due()


@shared_task(
    name="gpuqueue.sample_utilization",
    **RETRY_ON_DATABASE_ERRORS,
)
def sample_utilization_task() -> int:
    """Every minute: GPUs allocated against capacity, and idle iron
    (services/accounting/utilization.py)."""
    from gpuqueue.services.accounting.utilization import sample_utilization

    return sample_utilization()


@shared_task(
    name="gpuqueue.record_usage",
    **RETRY_ON_DATABASE_ERRORS,
)
def record_usage_task() -> int:
    """Every minute: the ledger rows of attempts still holding GPUs
    (services/accounting/usage_ledger.py; released attempts are closed by the move that releases
    them), then each running job's GPU utilization and idle flag
    (services/accounting/gpu_activity.py), then the ledger's totals for /metrics folded."""
    now = timezone.now()
    rows = record_open_attempts(now)
    sample_gpu_activity(now)
    fold_usage_totals()
    return rows
