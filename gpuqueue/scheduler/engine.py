"""plan(): a first, simple engine (priority then submission order, whole gangs, bin-pack)."""

from __future__ import annotations

from gpuqueue.scheduler.model import (
    Admission,
    Pending,
    PendingJob,
    Placement,
    Plan,
    Policy,
    Reason,
    ReasonCode,
    Snapshot,
)


def plan(snapshot: Snapshot, policy: Policy | None = None) -> Plan:
    policy = policy or Policy()
    free: dict[str, dict[str, int]] = {}
    for n in snapshot.nodes:
        if not n.schedulable:
            continue
        for flavor, cap in n.capacity.items():
            free.setdefault(flavor, {})[n.name] = cap - n.used_externally.get(flavor, 0)
    used: dict[tuple[str, str], int] = {}
    for r in snapshot.running:
        key = (r.team, r.flavor)
        used[key] = used.get(key, 0) + r.gpus
        by_node = free.get(r.flavor, {})
        for name, workers in r.placement:
            if name in by_node:
                by_node[name] -= workers * r.gpus_per_worker
    quotas = {(t.id, f): q for t in snapshot.teams for f, q in t.quotas.items()}

    def order(j: PendingJob) -> tuple[int, float, int]:
        return (-j.priority, j.submitted_at, j.id)

    admissions: list[Admission] = []
    pending: list[Pending] = []
    for pos, job in enumerate(sorted(snapshot.pending, key=order), start=1):
        quota = quotas.get((job.team, job.flavor))
        reason: Reason | None = None
        in_use = used.get((job.team, job.flavor), 0)
        nodes = free.get(job.flavor, {})
        if quota is None:
            reason = Reason(ReasonCode.NO_QUOTA)
        elif in_use + job.gpus > quota.limit:
            reason = Reason(
                ReasonCode.OVER_LIMIT,
                {"limit": quota.limit, "in_use": in_use, "requested": job.gpus},
            )
        else:
            placement = _binpack(nodes, job)
            if placement is None:
                fit = sum(f // job.gpus_per_worker for f in nodes.values() if f > 0)
                reason = Reason(
                    ReasonCode.NO_CAPACITY,
                    {
                        "workers": job.workers,
                        "gpus_per_worker": job.gpus_per_worker,
                        "workers_fit": min(fit, job.workers),
                        "free": sum(f for f in nodes.values() if f > 0),
                    },
                )
            else:
                for name, w in placement:
                    nodes[name] -= w * job.gpus_per_worker
                used[(job.team, job.flavor)] = in_use + job.gpus
                admissions.append(Admission(job.id, placement))
        if reason is not None:
            pending.append(Pending(job.id, reason, pos, pos))
    return Plan(admissions=tuple(admissions), pending=tuple(pending))


def _binpack(nodes: dict[str, int], job: PendingJob) -> Placement | None:
    g = job.gpus_per_worker
    left = job.workers
    chosen: dict[str, int] = {}
    for name, f in sorted(nodes.items(), key=lambda kv: (kv[1], kv[0])):
        take = min(f // g, left) if f >= g else 0
        if take:
            chosen[name] = take
            left -= take
            if left == 0:
                return tuple(sorted(chosen.items()))
    return None
