"""The admission cycle's hold phase: which PENDING jobs the engine is offered at all.

1. Dependencies (gpuqueue/services/jobs/dependencies.py): release the jobs whose conditions now
   hold, cancel those whose conditions can no longer hold, say why the others wait.
2. Array caps (gpuqueue/services/jobs/arrays.py): of each capped array's PENDING tasks, offer only
   as many as it has free slots.

Both are set-based statements that write only rows whose hold or reason changes, so a cycle
over a quiet queue pays two index scans. The snapshot leaves out every job with a hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpuqueue.services.jobs import arrays, dependencies


@dataclass(frozen=True, slots=True)
class HoldChanges:
    dependencies: dependencies.Resolved
    array_tasks_written: int


def update_holds(now: datetime) -> HoldChanges:
    # 1. before 2.: a task released from its dependencies is then counted against its cap.
    resolved = dependencies.resolve(now)
    return HoldChanges(resolved, arrays.hold_over_limit())
