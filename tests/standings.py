"""Tests set what a pending job shows (its reason, its places in line) as the cycle would."""

from __future__ import annotations

from typing import Any

from gpuqueue.models import Job, Standing


def show(job_id: int, **values: Any) -> None:
    """Set `values` (reason, queue_position, cluster_position) on the job's `Standing`."""
    Standing.objects.update_or_create(job_id=job_id, defaults=values)


# A job's id, state and what it shows, as `Job.objects.values_list(*ROW)` reads them.
ROW = ("id", "state", "standing__reason", "standing__queue_position", "standing__cluster_position")


def put_back(rows: list[tuple[Any, ...]]) -> None:
    """Each job (a `ROW`) back in its state, showing what it showed."""
    for job_id, state, reason, team, cluster in rows:
        Job.objects.filter(pk=job_id).update(state=state)
        if (reason, team, cluster) == (None, None, None):
            Standing.objects.filter(job_id=job_id).delete()
        else:
            show(job_id, reason=reason, queue_position=team, cluster_position=cluster)
