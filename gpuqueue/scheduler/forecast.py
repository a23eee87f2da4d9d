"""forecast(): estimated start times (first version: now if admitted this cycle)."""

from __future__ import annotations

from collections.abc import Mapping

from gpuqueue.scheduler.engine import plan
from gpuqueue.scheduler.model import Policy, Snapshot


def forecast(snapshot: Snapshot, policy: Policy | None = None) -> Mapping[int, float | None]:
    result = plan(snapshot, policy)
    admitted = {a.job_id for a in result.admissions}
    return {j.id: (snapshot.now if j.id in admitted else None) for j in snapshot.pending}
