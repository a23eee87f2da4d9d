"""The pending jobs that no state of the cluster can admit.

The forecast plays the queue forward until every pending job has a start; a job that can never
start would keep it stepping through every running job's end to its horizon, for nothing; and
such a job must not take its team's turn as a starving job (ordering.py). What decides it reads
only the nodes and the quotas, never the running jobs or the time:

1. the job's flavor has no schedulable node, or its nodes, empty, hold fewer of its workers than
   it has (a worker bigger than the largest node, a gang bigger than the flavor, or 3 workers of
   6 GPUs on nodes of 8 + 8 + 4; on nodes that limit CPU, memory or pods, their allocatable
   amounts count too: the engine's NEVER_FITS);
2. its team, or the team's department, has no quota for the flavor (NO_QUOTA);
3. the gang asks more than a limit of the team or its department (OVER_LIMIT at any usage);
4. a non-preemptible gang asks more than a guarantee (OVER_FAIR_SHARE at any usage).

(tests/scheduler/test_properties.py: each such job, alone on an empty cluster, is left pending
for one of those reasons.)
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuqueue.scheduler.ledger import FlavorLedger, Ledger
from gpuqueue.scheduler.model import (
    PendingJob,
    Quota,
    Snapshot,
    group_chains,
    group_quotas,
)
from gpuqueue.scheduler.placement import pods_fit


class NeverAdmits:
    """`never(job)`: whether no state admits the job. `flavors`: the ledger's, for the whole
    workers their schedulable nodes hold (`FlavorLedger.most_workers`, the engine's step 1);
    `quotas` per (group, flavor); `chains` per team: the team and its department, if any
    (model.group_chains)."""

    __slots__ = ("chains", "flavors", "quotas")

    def __init__(
        self,
        flavors: Mapping[str, FlavorLedger],
        quotas: Mapping[tuple[str, str], Quota],
        chains: Mapping[str, tuple[str, ...]],
    ) -> None:
        self.flavors = flavors
        self.quotas = quotas
        self.chains = chains

    @classmethod
    def of(cls, snapshot: Snapshot) -> NeverAdmits:
        """For a caller with no cycle (the forecast, the band): the same, from a bare ledger."""
        chains = group_chains(snapshot.teams)
        return cls(Ledger(snapshot.nodes, chains).flavors, group_quotas(snapshot.teams), chains)

    def __call__(self, job: PendingJob) -> bool:
        flavor, gpus = job.flavor, job.gpus
        fl = self.flavors.get(flavor)
        if gpus <= 0 or fl is None:
            return True
        if job.gpu_milli:
            # A fraction's quota counts in thousandths (rounded up: exact against whole
            # bounds); its shape the engine's step 1 judges (special.py), not whole workers.
            gpus = -(-job.workers * job.gpu_milli // 1000)
        elif job.gpu_models:
            pass  # its nodes are some of the flavor's: the engine's step 1 judges them
        elif job.pods:
            if not pods_fit(fl, job.pods):
                return True
        elif fl.most_workers(job.gpus_per_worker, job.cpu_per_worker, job.memory_per_worker) < (
            job.workers
        ):
            return True
        for group in self.chains.get(job.team, (job.team,)):
            quota = self.quotas.get((group, flavor))
            if quota is None or gpus > quota.limit:
                return True
            if not job.preemptible and gpus > quota.guarantee:
                return True
        return False


def never_admitted(snapshot: Snapshot) -> frozenset[int]:
    never = NeverAdmits.of(snapshot)
    return frozenset(job.id for job in snapshot.pending if never(job))
