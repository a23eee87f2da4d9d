"""Why a job is pending, as data with numbers.

The web layer turns these into sentences ("waiting for 8 GPUs as 4 x 2; 3 of 4 workers fit now;
6 GPUs free"); the engine only guarantees which numbers each code carries:

| code                   | numbers                                                             |
| ---------------------- | ------------------------------------------------------------------- |
| NEVER_FITS             | flavor, workers, gpus_per_worker, largest_node, flavor_capacity,    |
|                        | most_workers (of this size, on the empty nodes); and when a worker  |
|                        | asks more CPU, memory or pods than any node of enough GPUs has:     |
|                        | short, short_per_worker, short_largest                              |
| NO_QUOTA               | flavor, scope ("team" or "department")                             |
| OVER_FAIR_SHARE        | flavor, scope, guarantee, in_use (non-preemptible), requested       |
| OVER_LIMIT             | flavor, scope, limit, in_use, requested; for a job with its team's  |
|                        | turn: newer_gpus (held by the team's jobs started since)            |
| HELD_FOR_OLDER         | flavor, limit, in_use, requested, older_gpus, older_submitted_at;   |
|                        | job_ids: the team's older job with the turn (ordering.py, rule 1b)  |
| NO_CAPACITY            | flavor, workers, gpus_per_worker, workers_fit, free; and when the   |
|                        | job would take its team past its fair share: fair_share,            |
|                        | team_in_use, newer_gpus; and when it fits within its team's         |
|                        | guarantee but reclaim found no room: guarantee, guarantee_in_use,   |
|                        | borrowed, takeable; and when a node's CPU, memory or pods hold      |
|                        | fewer workers than its free GPUs: short, short_node,                |
|                        | short_node_gpus_free, short_left, short_allocatable,                |
|                        | short_per_worker                                                    |
| QUEUED_BEHIND_TEAM     | ahead (earlier pending jobs of the team) + the NO_CAPACITY numbers  |
| WAITING_FOR_PREEMPTION | flavor, workers, gpus_per_worker, gpus_back, from_teams; and when   |
|                        | every victim's checkpoint grace is known: saving_until; when some   |
|                        | have stopped: stopping; job_ids: the jobs being preempted           |
| BEHIND_RESERVATION     | flavor, expected_start; job_ids: the jobs holding the reservations  |
| RESERVED               | flavor, expected_start (math.inf when unknown), nodes; and          |
|                        | team_holds_none when it starves by that exception                   |
| IN_SHARE_DEBT          | flavor, fair_share, in_use, requested, debt_seconds, threshold_seconds, |
|                        | recovers_at (math.inf when never); guaranteed_team when another     |
|                        | team waits within its guarantee                                     |
| WAITING_FOR_RECLAIM    | flavor, workers, gpus_per_worker, free, borrowers (team ids, ", "), |
|                        | borrowed, min_runtime_seconds, reclaim_at                           |
| NO_DOMAIN              | flavor, workers, gpus_per_worker, level (its node label), domains,  |
|                        | best_fit (the most workers one domain holds now), largest (the most |
|                        | one holds empty: below workers, never), workers_fit, free           |

Resources besides GPUs (`short`: "cpu" in millicores, "memory" in bytes, or "pods"): in
NO_CAPACITY, `short_node` is the node whose free GPUs hold the most workers that its room does
not (`short_node_gpus_free` of them free), `short_left` what others leave of the resource there
and `short_allocatable` all of it; `short_per_worker` what one worker asks (a pod: 1). In
NEVER_FITS, `short_largest` is the most any node of enough GPUs has allocatable.

NO_CAPACITY's `team_in_use` is what the team holds of the flavor (held or promised, less what is
being preempted), `newer_gpus` the part of it held by jobs that started after the waiting job was
submitted: a gang's turn comes within its team's share only when the team's jobs leave its GPUs
free together, and the team's other jobs start whenever they fit.

WAITING_FOR_PREEMPTION: `gpus_back` the GPUs the jobs waited on hold (a victim bigger than the
need gives back all of its GPUs), `from_teams` their teams (", "), `saving_until` the latest
time one of them may still be saving its checkpoint, `stopping` how many of them have stopped
and wait only for their pods to terminate.

NO_CAPACITY of a job within its guarantee: `guarantee_in_use` what the team holds of its
`guarantee`, `borrowed` the GPUs other teams hold beyond min(guarantee, fair share), `takeable`
the part of those in preemptible jobs that reclaim may take (past their minimum runtime, not
being preempted, each small enough to leave its team that much): what stops reclaim is the
rest (non-preemptible work, jobs that would put their team below its own guarantee).

IN_SHARE_DEBT's seconds are GPU-seconds (usage.py): `debt_seconds` the team's debt now,
`threshold_seconds` the debt above which it borrows only on nodes in use (and nothing while
`guaranteed_team`, another team, waits for a job within its guarantee), `recovers_at` when
the debt is expected under the threshold if the team holds no more than min(in_use, fair_share)
until then (what it holds less than its share is credited to it, as usage.py does).

A job asking a fraction of a GPU or given GPU models (shared_gpus.py) carries, in NEVER_FITS and
NO_CAPACITY, `gpu_milli` (thousandths of one GPU per worker; 0: whole GPUs), `gpu_models` (", ";
empty: any) and `most_gpu_room` (the most thousandths free on one GPU of its nodes now, or 0 in
NEVER_FITS); NEVER_FITS adds `shared` 0 when its flavor does not share GPUs. In OVER_LIMIT and
OVER_FAIR_SHARE it carries `in_use_milli` and `requested_milli`, exact where `in_use` is rounded
up to whole GPUs. Its NEVER_FITS numbers count only the nodes of its models.

WAITING_FOR_RECLAIM: `borrowers` the teams whose jobs reclaim would preempt, `borrowed` the GPUs
they hold beyond their fair shares, `min_runtime_seconds` the longest minimum runtime among those
jobs still protected, `reclaim_at` the earliest time enough of them are out of it for the gang.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from gpuqueue.scheduler.ledger import Short
from gpuqueue.scheduler.model import PendingJob, Reason, ReasonCode


def never_fits(
    job: PendingJob,
    largest_node: int,
    flavor_capacity: int,
    most_workers: int,
    short: Short | None = None,
) -> Reason:
    numbers: dict[str, int | float | str] = {
        "flavor": job.flavor,
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "largest_node": largest_node,
        "flavor_capacity": flavor_capacity,
        "most_workers": most_workers,
    }
    if short is not None:
        numbers["short"] = short.resource
        numbers["short_per_worker"] = short.per_worker
        numbers["short_largest"] = short.allocatable
    return Reason(ReasonCode.NEVER_FITS, numbers)


def with_shared(reason: Reason, job: PendingJob, most_room: int, shared: bool = True) -> Reason:
    """A reason of a fractional or model-bound job, with what it asks of one GPU."""
    numbers = dict(reason.numbers)
    numbers["gpu_milli"] = job.gpu_milli
    numbers["gpu_models"] = ", ".join(job.gpu_models)
    numbers["most_gpu_room"] = most_room
    if not shared:
        numbers["shared"] = 0
    return Reason(reason.code, numbers, reason.job_ids)


def in_thousandths(reason: Reason, job: PendingJob, in_use_milli: int, asked_milli: int) -> Reason:
    """A quota reason of such a job, with the exact usage and request in thousandths."""
    numbers = dict(reason.numbers)
    numbers["in_use_milli"] = in_use_milli
    numbers["requested_milli"] = asked_milli
    numbers["gpu_milli"] = job.gpu_milli
    return Reason(reason.code, numbers, reason.job_ids)


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


def in_share_debt(
    job: PendingJob,
    fair_share: int,
    in_use: int,
    debt_seconds: float,
    threshold_seconds: float,
    recovers_at: float,
    guaranteed: str | None = None,
) -> Reason:
    """`guaranteed`: another team that waits within its guarantee (engine.py, 4b)."""
    numbers: dict[str, int | float | str] = {
        "flavor": job.flavor,
        "fair_share": fair_share,
        "in_use": in_use,
        "requested": job.gpus,
        "debt_seconds": round(debt_seconds),
        "threshold_seconds": round(threshold_seconds),
        "recovers_at": recovers_at,
    }
    if guaranteed is not None:
        numbers["guaranteed_team"] = guaranteed
    return Reason(ReasonCode.IN_SHARE_DEBT, numbers)


def over_limit(job: PendingJob, scope: str, limit: int, in_use: int, newer: int = 0) -> Reason:
    """`newer`: of `in_use`, the GPUs held by the team's jobs started since this job (which
    has the team's turn) was submitted."""
    numbers: dict[str, int | float | str] = {
        "flavor": job.flavor,
        "scope": scope,
        "limit": limit,
        "in_use": in_use,
        "requested": job.gpus,
    }
    if newer:
        numbers["newer_gpus"] = newer
    return Reason(ReasonCode.OVER_LIMIT, numbers)


def held_for_older(job: PendingJob, older: PendingJob, limit: int, in_use: int) -> Reason:
    """A newer job of the team held while `older` has the team's turn (ordering.py, rule 1b)."""
    return Reason(
        ReasonCode.HELD_FOR_OLDER,
        {
            "flavor": job.flavor,
            "limit": limit,
            "in_use": in_use,
            "requested": job.gpus,
            "older_gpus": older.gpus,
            "older_submitted_at": older.submitted_at,
        },
        (older.id,),
    )


class BeyondShare(NamedTuple):
    """A waiting job that would take its team past its fair share (NO_CAPACITY's extras)."""

    fair_share: int
    in_use: int  # the team's GPUs of the flavor, held or promised
    newer: int  # of them, held by jobs started since the waiting job was submitted


class GuaranteeBlocked(NamedTuple):
    """A waiting job within its team's guarantee whose reclaim found no room (NO_CAPACITY's
    extras)."""

    guarantee: int
    in_use: int  # what the team holds of the flavor
    borrowed: int  # GPUs other teams hold beyond min(guarantee, fair share)
    takeable: int  # of them, in jobs reclaim may take


def no_capacity(
    job: PendingJob,
    workers_fit: int,
    free: int,
    ahead: int,
    beyond_share: BeyondShare | None = None,
    blocked: GuaranteeBlocked | None = None,
    short: Short | None = None,
) -> Reason:
    workers = job.workers
    numbers: dict[str, int | float | str] = {
        "flavor": job.flavor,
        "workers": workers,
        "gpus_per_worker": job.gpus_per_worker,
        "workers_fit": workers_fit if workers_fit < workers else workers,
        "free": free,
    }
    if beyond_share is not None:
        numbers["fair_share"] = beyond_share.fair_share
        numbers["team_in_use"] = beyond_share.in_use
        numbers["newer_gpus"] = beyond_share.newer
    if blocked is not None:
        numbers["guarantee"] = blocked.guarantee
        numbers["guarantee_in_use"] = blocked.in_use
        numbers["borrowed"] = blocked.borrowed
        numbers["takeable"] = blocked.takeable
    if short is not None:
        numbers["short"] = short.resource
        numbers["short_node"] = short.node
        numbers["short_node_gpus_free"] = short.gpus_free
        numbers["short_left"] = short.left
        numbers["short_allocatable"] = short.allocatable
        numbers["short_per_worker"] = short.per_worker
    if ahead:
        numbers["ahead"] = ahead
        return Reason(_QUEUED_BEHIND_TEAM, numbers)
    return Reason(_NO_CAPACITY, numbers)


# Most jobs of a busy cycle wait: these codes are read once, not per reason (an enum member
# is slow to look up on its class).
_NO_CAPACITY = ReasonCode.NO_CAPACITY
_QUEUED_BEHIND_TEAM = ReasonCode.QUEUED_BEHIND_TEAM


def waiting_for_preemption(
    job: PendingJob,
    job_ids: tuple[int, ...],
    gpus_back: int,
    from_teams: tuple[str, ...],
    saving_until: float | None,
    stopping: int = 0,
) -> Reason:
    numbers: dict[str, int | float | str] = {
        "flavor": job.flavor,
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "gpus_back": gpus_back,
        "from_teams": ", ".join(from_teams),
    }
    if saving_until is not None:
        numbers["saving_until"] = saving_until
    if stopping:
        numbers["stopping"] = stopping
    return Reason(ReasonCode.WAITING_FOR_PREEMPTION, numbers, tuple(sorted(job_ids)))


def behind_reservation(job: PendingJob, expected_start: float, job_ids: tuple[int, ...]) -> Reason:
    return Reason(
        ReasonCode.BEHIND_RESERVATION,
        {"flavor": job.flavor, "expected_start": expected_start},
        tuple(sorted(set(job_ids))),
    )


def reserved(
    job: PendingJob,
    expected_start: float,
    nodes: int,
    *,
    team_holds_none: bool = False,
) -> Reason:
    """`team_holds_none`: it starves because its team holds none of the flavor and is owed
    GPU-time (ordering.py, rule 1), however short its wait."""
    numbers: dict[str, int | float | str] = {
        "flavor": job.flavor,
        "expected_start": expected_start,
        "nodes": nodes,
    }
    if team_holds_none:
        numbers["team_holds_none"] = 1
    return Reason(ReasonCode.RESERVED, numbers)


def waiting_for_reclaim(
    job: PendingJob,
    free: int,
    borrowers: tuple[str, ...],
    borrowed: int,
    min_runtime_seconds: float,
    reclaim_at: float,
) -> Reason:
    return Reason(
        ReasonCode.WAITING_FOR_RECLAIM,
        {
            "flavor": job.flavor,
            "workers": job.workers,
            "gpus_per_worker": job.gpus_per_worker,
            "free": free,
            "borrowers": ", ".join(borrowers),
            "borrowed": borrowed,
            "min_runtime_seconds": round(min_runtime_seconds),
            "reclaim_at": reclaim_at,
        },
    )


def no_domain(job: PendingJob, best: DomainBest, workers_fit: int, free: int) -> Reason:
    """A required topology level no domain of which holds the gang (topology.py)."""
    return Reason(
        ReasonCode.NO_DOMAIN,
        {
            "flavor": job.flavor,
            "workers": job.workers,
            "gpus_per_worker": job.gpus_per_worker,
            "level": best.level,
            "domains": best.domains,
            "best_fit": best.fit,
            "largest": best.empty,
            "workers_fit": min(workers_fit, job.workers),
            "free": free,
        },
    )


class DomainBest(Protocol):
    """What `no_domain` reads of topology.Best."""

    @property
    def level(self) -> str: ...
    @property
    def fit(self) -> int: ...
    @property
    def empty(self) -> int: ...
    @property
    def domains(self) -> int: ...
