"""The demo's Celery task: a trickle of submissions while GPUQUEUE_DEMO is on."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from gpuqueue.demo.data import submit_demo_traffic


@shared_task(name="gpuqueue.submit_demo_jobs", ignore_result=True)
def submit_demo_jobs() -> int:
    if not settings.GPUQUEUE_DEMO:
        return 0
    return submit_demo_traffic()
