"""Small builders for engine snapshots, and the table-driven Case that every engine test uses.

Times are seconds around NOW; GPU flavors default to "h100". A running job is started an hour
before NOW unless told otherwise, so it is past its minimum runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuqueue.scheduler import forecast, plan
from gpuqueue.scheduler.model import (
    Node,
    PendingJob,
    Placement,
    Plan,
    Policy,
    Quota,
    ReasonCode,
    RunningJob,
    Snapshot,
    Team,
)

NOW = 100_000.0
HOUR = 3600.0
CPU = 1000  # millicores
GIB = 1 << 30


def node(
    name: str,
    *,
    schedulable: bool = True,
    external: int = 0,
    cpu: int | None = None,
    memory: int | None = None,
    pods: int | None = None,
    external_cpu: int = 0,
    external_memory: int = 0,
    external_pods: int = 0,
    **flavors: int,
) -> Node:
    """node("n1", h100=8): a node offering 8 H100s; `external` GPUs of its first flavor are
    held by pods gpuqueue did not create. node("n1", h100=8, cpu=224 * CPU): it also has 224
    allocatable CPUs (memory in bytes, pods a count; None: not limited), `external_cpu` of them
    requested by pods gpuqueue did not create."""
    used = {next(iter(flavors)): external} if external else {}
    return Node(
        name,
        dict(flavors),
        used,
        schedulable,
        cpu=cpu,
        memory=memory,
        pods=pods,
        cpu_used_externally=external_cpu,
        memory_used_externally=external_memory,
        pods_used_externally=external_pods,
    )


def nodes(count: int, prefix: str = "n", **flavors: int) -> tuple[Node, ...]:
    """nodes(2, h100=8): n1 and n2, each offering 8 H100s."""
    return tuple(Node(f"{prefix}{i}", dict(flavors)) for i in range(1, count + 1))


def team(
    id: str,
    *,
    guarantee: int = 0,
    limit: int = 1000,
    weight: float = 1.0,
    flavor: str = "h100",
    parent: str | None = None,
    quotas: Mapping[str, Quota] | None = None,
) -> Team:
    return Team(id, dict(quotas) if quotas else {flavor: Quota(guarantee, limit, weight)}, parent)


def running(
    id: int,
    team: str,
    placement: Mapping[str, int],
    *,
    gpus: int = 1,
    priority: int = 0,
    preemptible: bool = True,
    started: float = NOW - HOUR,
    user: str = "u",
    flavor: str = "h100",
    max_runtime: float | None = None,
    expected_runtime: float | None = None,
    min_runtime_until: float | None = None,
    preempting_since: float | None = None,
    checkpoint_grace: float | None = None,
    preempted_for: int | None = None,
    cpu: int = 0,
    memory: int = 0,
) -> RunningJob:
    """running(10, "a", {"n1": 2}, gpus=4): two workers of 4 GPUs on n1."""
    return RunningJob(
        id=id,
        team=team,
        user=user,
        flavor=flavor,
        gpus_per_worker=gpus,
        placement=tuple(sorted(placement.items())),
        priority=priority,
        preemptible=preemptible,
        started_at=started,
        max_runtime=max_runtime,
        expected_runtime=expected_runtime,
        min_runtime_until=min_runtime_until,
        preempting_since=preempting_since,
        checkpoint_grace=checkpoint_grace,
        preempted_for=preempted_for,
        cpu_per_worker=cpu,
        memory_per_worker=memory,
    )


def pending(
    id: int,
    team: str,
    *,
    workers: int = 1,
    gpus: int = 1,
    priority: int = 0,
    preemptible: bool = True,
    submitted: float | None = None,
    user: str = "u",
    flavor: str = "h100",
    max_runtime: float | None = None,
    expected_runtime: float | None = None,
    cpu: int = 0,
    memory: int = 0,
    declared: bool = False,
) -> PendingJob:
    """pending(1, "a", workers=4, gpus=2): a gang of 4 workers of 2 GPUs, submitted at NOW - id
    seconds so that smaller ids are older unless told otherwise. An expected runtime is
    gpuqueue's prediction unless `declared` (the submitter's word)."""
    return PendingJob(
        id=id,
        team=team,
        user=user,
        flavor=flavor,
        workers=workers,
        gpus_per_worker=gpus,
        priority=priority,
        preemptible=preemptible,
        submitted_at=NOW - 1000 + id if submitted is None else submitted,
        max_runtime=max_runtime,
        expected_runtime=expected_runtime,
        runtime_predicted=expected_runtime is not None and not declared,
        cpu_per_worker=cpu,
        memory_per_worker=memory,
    )


@dataclass(frozen=True)
class Case:
    """One scenario and what the plan must say about it; None means "not checked"."""

    name: str
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    policy: Policy = field(default_factory=Policy)
    # Snapshot.share_balance: GPU-seconds per (team, flavor); None: no history.
    balance: dict[tuple[str, str], float] | None = None
    admitted: set[int] | None = None  # exactly these job ids are admitted
    placements: dict[int, dict[str, int]] | None = None
    borrowed: dict[int, bool] | None = None
    preempted: dict[int, str] | None = None  # exactly these victims, with the kind
    reasons: dict[int, ReasonCode] | None = None
    numbers: dict[int, dict[str, int | float | str]] | None = None  # a subset of the numbers
    waits_on: dict[int, tuple[int, ...]] | None = None  # the reason's job_ids
    positions: dict[int, tuple[int, int]] | None = None  # (team, cluster)
    shares: dict[tuple[str, str], int] | None = None  # a subset of the fair shares
    reservations: dict[int, tuple[dict[str, int], float]] | None = None
    forecasts: dict[int, float | None] | None = None
    withdrawn: set[int] | None = None  # exactly these preemptions are withdrawn

    def snapshot(self) -> Snapshot:
        return Snapshot(
            NOW, self.nodes, self.teams, self.running, self.pending, share_balance=self.balance
        )


def placed(mapping: Mapping[str, int]) -> Placement:
    return tuple(sorted(mapping.items()))


def check(case: Case) -> Plan:
    """Plan the case and compare every expectation it states."""
    result = plan(case.snapshot(), case.policy)
    admissions = {a.job_id: a for a in result.admissions}
    why = {p.job_id: p for p in result.pending}
    if case.admitted is not None:
        assert set(admissions) == case.admitted, {i: why[i].reason for i in why}
    for job_id, where in (case.placements or {}).items():
        assert admissions[job_id].placement == placed(where)
    for job_id, flag in (case.borrowed or {}).items():
        assert admissions[job_id].borrowed is flag
    if case.preempted is not None:
        assert {p.job_id: p.reason for p in result.preemptions} == case.preempted
    for job_id, code in (case.reasons or {}).items():
        assert why[job_id].reason.code == code, why[job_id].reason
    for job_id, numbers in (case.numbers or {}).items():
        got = dict(why[job_id].reason.numbers)
        assert {k: got.get(k) for k in numbers} == numbers, got
    for job_id, ids in (case.waits_on or {}).items():
        assert why[job_id].reason.job_ids == ids
    for job_id, position in (case.positions or {}).items():
        assert (why[job_id].team_position, why[job_id].cluster_position) == position
    for key, share in (case.shares or {}).items():
        assert result.fair_shares.get(key, 0) == share, result.fair_shares
    if case.reservations is not None:
        got_r = {r.job_id: (r.placement, r.expected_start) for r in result.reservations}
        want_r = {k: (placed(p), t) for k, (p, t) in case.reservations.items()}
        assert got_r == want_r
    if case.withdrawn is not None:
        assert set(result.withdrawals) == case.withdrawn
    if case.forecasts is not None:
        starts = forecast(case.snapshot(), case.policy)
        assert {k: starts[k] for k in case.forecasts} == case.forecasts
    return result
