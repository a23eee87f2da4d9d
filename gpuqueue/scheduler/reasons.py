"""Why a job is pending, as data with numbers.

The web layer turns these into sentences ("waiting for 8 GPUs as 4 x 2; 3 of 4 workers fit now;
6 GPUs free"); the engine only guarantees which numbers each code carries:

| code                   | numbers                                                             |
| ---------------------- | ------------------------------------------------------------------- |
| NEVER_FITS             | flavor, workers, gpus_per_worker, largest_node, flavor_capacity     |
| NO_QUOTA               | flavor, scope ("team" or "department")                             |
| OVER_FAIR_SHARE        | flavor, scope, guarantee, in_use (non-preemptible), requested       |
| OVER_LIMIT             | flavor, scope, limit, in_use, requested                             |
| NO_CAPACITY            | flavor, workers, gpus_per_worker, workers_fit, free                 |
| QUEUED_BEHIND_TEAM     | ahead (earlier pending jobs of the team) + the NO_CAPACITY numbers  |
| WAITING_FOR_PREEMPTION | flavor, workers, gpus_per_worker; job_ids: the jobs being preempted |
| BEHIND_RESERVATION     | flavor, expected_start; job_ids: the jobs holding the reservations  |
| RESERVED               | flavor, expected_start (math.inf when unknown), nodes               |
"""

from __future__ import annotations

from gpuqueue.scheduler.model import PendingJob, Reason, ReasonCode


def never_fits(job: PendingJob, largest_node: int, flavor_capacity: int) -> Reason:
    return Reason(
        ReasonCode.NEVER_FITS,
        {
            "flavor": job.flavor,
            "workers": job.workers,
            "gpus_per_worker": job.gpus_per_worker,
            "largest_node": largest_node,
            "flavor_capacity": flavor_capacity,
        },
    )


def no_quota(job: PendingJob, scope: str) -> Reason:
    return Reason(ReasonCode.NO_QUOTA, {"flavor": job.flavor, "scope": scope})


def over_fair_share(job: PendingJob, scope: str, guarantee: int, in_use: int) -> Reason:
    return Reason(
        ReasonCode.OVER_FAIR_SHARE,
        {
            "flavor": job.flavor,
            "scope": scope,
            "guarantee": guarantee,
            "in_use": in_use,
            "requested": job.gpus,
        },
    )


def over_limit(job: PendingJob, scope: str, limit: int, in_use: int) -> Reason:
    return Reason(
        ReasonCode.OVER_LIMIT,
        {
            "flavor": job.flavor,
            "scope": scope,
            "limit": limit,
            "in_use": in_use,
            "requested": job.gpus,
        },
    )


def no_capacity(job: PendingJob, workers_fit: int, free: int, ahead: int) -> Reason:
    numbers: dict[str, int | float | str] = {
        "flavor": job.flavor,
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "workers_fit": min(workers_fit, job.workers),
        "free": free,
    }
    if ahead:
        numbers["ahead"] = ahead
        return Reason(ReasonCode.QUEUED_BEHIND_TEAM, numbers)
    return Reason(ReasonCode.NO_CAPACITY, numbers)


def waiting_for_preemption(job: PendingJob, job_ids: tuple[int, ...]) -> Reason:
    return Reason(
        ReasonCode.WAITING_FOR_PREEMPTION,
        {"flavor": job.flavor, "workers": job.workers, "gpus_per_worker": job.gpus_per_worker},
        tuple(sorted(job_ids)),
    )


def behind_reservation(job: PendingJob, expected_start: float, job_ids: tuple[int, ...]) -> Reason:
    return Reason(
        ReasonCode.BEHIND_RESERVATION,
        {"flavor": job.flavor, "expected_start": expected_start},
        tuple(sorted(set(job_ids))),
    )


def reserved(job: PendingJob, expected_start: float, nodes: int) -> Reason:
    return Reason(
        ReasonCode.RESERVED,
        {"flavor": job.flavor, "expected_start": expected_start, "nodes": nodes},
    )
