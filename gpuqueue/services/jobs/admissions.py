"""The cycle's admissions, written in bulk: a wave of thousands of admitted jobs is one
statement of the door (services/jobs/transitions.py), not statements per job.

Guarded by the state the cycle saw (PENDING), so a job cancelled since the snapshot is left
alone; each admitted job gets its event and its attempt's first row in the GPU-hours ledger in
the same statement, so a job is never ADMITTED without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuqueue.core.states import JobState
from gpuqueue.services.jobs.transitions import Move, move_jobs

BORROWING = "borrowing idle GPUs"
WITHIN_SHARE = "within fair share"


@dataclass(frozen=True)
class Admitted:
    job_id: int
    placement: dict[str, int]  # node -> workers
    borrowed: bool
    # A fractional job's [node, GPU index] per worker, as the engine packed them; else empty.
    devices: list[list[Any]] = field(default_factory=list)
    # The topology domain its gang went to, "label=value" (scheduler/topology.py); "": none.
    domain: str = ""
    # A gang of pods of different asks: each pod's node (core/pod_sets.py); else None.
    pod_nodes: list[str] | None = None


def admit_all(admissions: Sequence[Admitted], now: datetime, actor: str) -> list[int]:
    """Move each job still PENDING to ADMITTED with its placement (and a fractional job's
    devices); returns the ids moved, in
    the order given. What it showed while pending is cleared and its attempts counted."""
    return move_jobs(
        [
            Move(
                a.job_id,
                JobState.PENDING,
                changes={
                    "placement": a.placement,
                    "gpu_devices": a.devices,
                    "placement_domain": a.domain,
                    "pod_nodes": a.pod_nodes,
                },
                reason=BORROWING if a.borrowed else WITHIN_SHARE,
                details={
                    "placement": a.placement,
                    "borrowed": a.borrowed,
                    **({"domain": a.domain} if a.domain else {}),
                },
            )
            for a in admissions
        ],
        JobState.ADMITTED,
        reason=WITHIN_SHARE,
        actor=actor,
        changes={
            "admitted_at": now,
            "started_at": None,
        },
        counted=("attempts",),
    )
