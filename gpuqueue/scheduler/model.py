"""Inputs and outputs of the admission engine: frozen, slotted dataclasses.

This module is the contract between the engine and its callers (the admission cycle, the
simulator, the benchmarks). Fields may be added with defaults; none is renamed or removed
without updating every caller. Times are seconds (floats, epoch or virtual); GPU counts are ints.
A flavor is named by a string (the Flavor's name in the database).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from gpuqueue.scheduler.fragmentation import Workload

# A placement: (node name, workers on that node), sorted by node name.
Placement = tuple[tuple[str, int], ...]
# What one pod of a gang asks: (GPUs, CPU millicores, memory bytes).
PodAsk = tuple[int, int, int]
# What a job's workers on one node take there: (node, GPUs, (CPU millicores, memory bytes, pods)).
NodeAsk = tuple[str, int, tuple[int, int, int]]


@dataclass(frozen=True, slots=True)
class Quota:
    guarantee: int
    limit: int
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Team:
    id: str
    quotas: Mapping[str, Quota]  # flavor -> quota; a flavor missing here means no access
    parent: str | None = None  # a department (also a Team in the snapshot) or None


def group_chains(teams: Sequence[Team]) -> dict[str, tuple[str, ...]]:
    """team -> (team, its department) or (team,): the groups a job's GPUs count against."""
    ids = {t.id for t in teams}
    return {t.id: (t.id, t.parent) if t.parent in ids else (t.id,) for t in teams}


def group_quotas(teams: Sequence[Team]) -> dict[tuple[str, str], Quota]:
    """(team or department, flavor) -> its quota."""
    return {(t.id, flavor): quota for t in teams for flavor, quota in t.quotas.items()}


def whole_workers(sizes: Mapping[int, int], gpus_per_worker: int) -> int:
    """How many workers of `gpus_per_worker` GPUs fit on empty nodes, given as GPUs per node ->
    how many nodes: a worker runs on one node, so 3 workers of 6 fit no 8 + 8 + 4 GPUs."""
    return sum(size // gpus_per_worker * count for size, count in sizes.items())


@dataclass(frozen=True, slots=True)
class Draining:
    """GPUs of a node that the pods of a job which no longer holds them (requeued after its
    preemption) still hold while they terminate: they come back, first to the job they were
    taken for, so that job waits for them instead of preempting another job."""

    flavor: str
    gpus: int
    job_id: int  # whose pods hold them
    for_job_id: int | None = None  # the job its preemption was for; None: the first to claim


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    capacity: Mapping[str, int]  # flavor -> GPUs this node offers
    # GPUs held by work gpuqueue did not place (pods it did not create), per flavor.
    used_externally: Mapping[str, int] = field(default_factory=dict)
    schedulable: bool = True  # False when cordoned, NotReady or drained
    # GPUs coming back from terminating pods of gpuqueue's jobs (not in used_externally).
    draining: tuple[Draining, ...] = ()
    # Allocatable CPU (millicores), memory (bytes) and pods; None: not limited (the trace
    # replay's nodes know only GPUs). A worker is one pod and asks its job's CPU and memory.
    cpu: int | None = None
    memory: int | None = None
    pods: int | None = None
    # What pods gpuqueue did not make request there (gpuqueue's own are the running jobs').
    cpu_used_externally: int = 0
    memory_used_externally: int = 0
    pods_used_externally: int = 0
    model: str | None = None  # the GPU model (product) of the node's GPUs; None: not known
    # The node's values of its flavors' topology levels (Snapshot.topologies): label key ->
    # value, e.g. {"example.com/rack": "r07"}. A level it lacks puts it in no domain of it.
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def limited(self) -> bool:
        """Whether anything besides GPUs can stop a worker here."""
        return self.cpu is not None or self.memory is not None or self.pods is not None


@dataclass(frozen=True, slots=True)
class RunningJob:
    """An admitted job that holds GPUs (ADMITTED, RUNNING or PREEMPTING)."""

    id: int
    team: str
    user: str
    flavor: str
    gpus_per_worker: int
    placement: Placement
    priority: int
    preemptible: bool
    started_at: float  # when it was admitted
    max_runtime: float | None = None  # seconds
    expected_runtime: float | None = None  # seconds, a better guess than max_runtime
    min_runtime_until: float | None = None  # not preemptible before this time
    preempting_since: float | None = None  # set while a checkpoint is in progress
    # Seconds it has to save a checkpoint once preempted (its deadline: preempting_since plus
    # this); None when not known. Only reasons read it.
    checkpoint_grace: float | None = None
    # The job its preemption was for, while it is being preempted for one: its GPUs are
    # promised to that job while it is pending (engine.Cycle.promised), and the preemption is
    # withdrawn when no job claims them (`Plan.withdrawals`).
    preempted_for: int | None = None
    # Its GPUs were flagged idle and its flavor's policy reclaims idle borrowers first
    # (gpuqueue/services/accounting/gpu_activity.py): among reclaim victims it goes first.
    idle_reclaim_first: bool = False
    cpu_per_worker: int = 0  # millicores each worker (pod) requests
    memory_per_worker: int = 0  # bytes each worker requests
    # Derived from the placement once, not on every read: a plan reads them for every running
    # job several times (the ledger, demand, victim searches).
    workers: int = field(init=False, repr=False, compare=False)
    gpus: int = field(init=False, repr=False, compare=False)
    # A fractional job (shared_gpus.py): each worker holds `gpu_milli` thousandths of one GPU,
    # named in `devices` as (node, GPU index on that node), sorted; gpus_per_worker is 1.
    gpu_milli: int = 0
    devices: tuple[tuple[str, int], ...] = ()
    # A gang of pods of different asks (`PendingJob.pods`): what its pods take on each node,
    # (node, CPU millicores, memory bytes, pods), sorted; empty: workers x the per-worker asks.
    # Its placement then counts workers of gpus_per_worker GPUs that add up to each node's.
    rooms: tuple[tuple[str, int, int, int], ...] = ()

    def __post_init__(self) -> None:
        workers = sum(n for _, n in self.placement)
        object.__setattr__(self, "workers", workers)
        object.__setattr__(self, "gpus", workers * self.gpus_per_worker)

    def room_on(self, node: str, workers: int) -> tuple[int, int, int]:
        """CPU millicores, memory bytes and pods its `workers` on `node` take there."""
        for name, cpu, memory, pods in self.rooms:  # a gang's few nodes
            if name == node:
                return (cpu, memory, pods)
        if self.rooms:
            return (0, 0, 0)
        return (workers * self.cpu_per_worker, workers * self.memory_per_worker, workers)


# Shortest predicted first inside a team, with aging (ordering.py, rule 5): a job expected to run
# R seconds takes its turn as if submitted RUNTIME_AGING x R later. Short jobs pass long ones,
# but only those submitted less than that before them, so a long job is never passed forever;
# the starvation guard (rule 1) still goes by the real submission. 0: first come, first served.
RUNTIME_AGING = 1.0
# The runtime a job with none known (no declared or predicted one) takes its turn with: an
# hour, a common default of batch schedulers. Not zero, or leaving the runtime out would jump
# the queue: a job declaring less than this goes earlier, one declaring more later.
UNKNOWN_RUNTIME = 3600.0

# What the engine's steps read of a job that is not starving: team, flavor, workers, GPUs per
# worker, priority, preemptible, max runtime, CPU and memory per worker, thousandths of a GPU
# per worker, the GPU models it accepts, its topology level and whether it requires it, and its
# pods' asks when they differ (`PendingJob.kind`).
Kind = tuple[
    str,
    str,
    int,
    int,
    int,
    bool,
    float | None,
    int,
    int,
    int,
    tuple[str, ...],
    str,
    bool,
    tuple[tuple[int, int, int], ...],
]


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: int
    team: str
    user: str
    flavor: str
    workers: int
    gpus_per_worker: int
    priority: int
    preemptible: bool
    submitted_at: float
    max_runtime: float | None = None
    expected_runtime: float | None = None
    cpu_per_worker: int = 0  # millicores each worker (pod) requests
    memory_per_worker: int = 0  # bytes each worker requests
    # Whether expected_runtime is gpuqueue's prediction from finished jobs rather than the
    # submitter's word: only a prediction (or an enforced max_runtime) lets a job backfill
    # onto a reservation (starvation.backfill_runtime), as nothing holds a job to a
    # declared expected runtime.
    runtime_predicted: bool = False
    gpus: int = field(init=False, repr=False, compare=False)  # workers x GPUs per worker
    # What the engine's steps read of a job that is not starving, made once: a plan looks up
    # the verdict for this kind for every pending job (engine.Cycle._consider).
    kind: Kind = field(init=False, repr=False, compare=False)
    # Its place among one user's jobs, best first: higher priority, earlier turn (its submission
    # plus RUNTIME_AGING x its expected runtime), smaller id (ordering.py, rules 3, 5 and 6),
    # made once: a plan sorts every queue by it.
    rank: tuple[int, float, int] = field(init=False, repr=False, compare=False)
    # 0: whole GPUs (gpus_per_worker of them); 1..999: each worker takes that many thousandths
    # of one GPU of a shared flavor (Snapshot.shared_flavors), and gpus_per_worker is 1.
    gpu_milli: int = 0
    # Empty: any node of the flavor; else only nodes whose `Node.model` is one of these.
    gpu_models: tuple[str, ...] = ()
    # Whether it asks for a fraction of a GPU or for given models (shared_gpus.py), made once:
    # a plan asks it of every job it considers.
    shared: bool = field(init=False, repr=False, compare=False)
    # A topology level of its flavor (a node label key, Snapshot.topologies): all its workers
    # in one domain of it (one rack, one NVLink domain), required or preferred (topology.py).
    # "": anywhere.
    topology_level: str = ""
    topology_required: bool = False
    # When it last came back to the queue after holding GPUs (a preemption, a lost node); None:
    # pending since its submission. A gang's patience for one domain counts from here.
    requeued_at: float | None = None
    # A gang whose pods ask different GPUs (a PyTorchJob's 1-GPU master beside 8-GPU workers,
    # a Ray head with a GPU): each pod's ask, in the job's pod order; empty: all alike.
    # `workers` is then its pods, gpus_per_worker and the per-worker CPU and memory its
    # largest asks. On free GPUs each ask's pods are placed in turn (engine.Cycle._fit_pods);
    # the other steps plan each pod in a slot of those largest asks (a plan whose slots fit
    # fits the pods). The gang holds, and its team is charged, each pod's own (`node_asks`).
    pods: tuple[PodAsk, ...] = ()

    def __post_init__(self) -> None:
        gpus = sum(p[0] for p in self.pods) if self.pods else self.workers * self.gpus_per_worker
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "shared", bool(self.gpu_milli or self.gpu_models))
        runtime = self.expected_runtime if self.expected_runtime is not None else self.max_runtime
        if runtime is None:
            runtime = UNKNOWN_RUNTIME
        turn = self.submitted_at + RUNTIME_AGING * runtime
        object.__setattr__(self, "rank", (-self.priority, turn, self.id))
        object.__setattr__(
            self,
            "kind",
            (
                self.team,
                self.flavor,
                self.workers,
                self.gpus_per_worker,
                self.priority,
                self.preemptible,
                self.max_runtime,
                self.cpu_per_worker,
                self.memory_per_worker,
                self.gpu_milli,
                self.gpu_models,
                self.topology_level,
                self.topology_required,
                self.pods,
            ),
        )


def pod_nodes(placement: Placement) -> tuple[str, ...]:
    """Each pod's node, in pod order: the placement's slots (each holds the largest pod), node
    by node, one pod each."""
    return tuple(node for node, n in placement for _ in range(n))


def by_ask(pods: Sequence[PodAsk]) -> list[tuple[PodAsk, list[int]]]:
    """A gang's pods grouped by ask, largest first: (ask, the indexes of its pods)."""
    groups: dict[PodAsk, list[int]] = {}
    for i, ask in enumerate(pods):
        groups.setdefault(ask, []).append(i)
    return sorted(groups.items(), reverse=True)


def node_asks(nodes: Sequence[str], pods: Sequence[PodAsk]) -> list[NodeAsk]:
    """What a gang of pods of different asks takes on each node, given each pod's node."""
    by_node: dict[str, list[int]] = {}
    for node, (gpus, cpu, memory) in zip(nodes, pods, strict=True):
        total = by_node.setdefault(node, [0, 0, 0, 0])
        total[0] += gpus
        total[1] += cpu
        total[2] += memory
        total[3] += 1
    return [(node, t[0], (t[1], t[2], t[3])) for node, t in by_node.items()]


class PlacementStrategy(str, Enum):  # noqa: UP042 -- callers compare and str() these as is
    BINPACK = "binpack"
    SPREAD = "spread"
    # The node (and GPU) whose expected fragmentation against the workload grows least
    # (fragmentation.py; Weng et al., ATC'23).
    FRAGMENTATION = "fgd"


@dataclass(frozen=True, slots=True)
class Policy:
    placement: PlacementStrategy = PlacementStrategy.BINPACK
    starvation_seconds: float = 3600.0
    min_runtime_seconds: float = 300.0
    preemption: bool = True  # within a team, by priority
    reclaim: bool = True  # across teams, of borrowed capacity
    max_victim_candidates: int = 256  # bound on the victim search per pending job
    max_preemptions_per_cycle: int = 64
    max_victim_searches_per_cycle: int = 64  # victim searches (failed or not) per cycle
    max_reservations: int = 8  # starving jobs that may hold nodes at once
    # A job that declares no max runtime backfills onto a reservation's GPUs when this many
    # times its predicted runtime ends before the reservation's start (starvation.py,
    # `backfill_runtime`); 0: only by a declared max runtime. Without it a reservation on a
    # cluster whose jobs declare none (the Philly trace) idles its nodes until they drain.
    backfill_prediction_factor: float = 2.0
    # How long a preempted job is expected to keep its GPUs (checkpoint grace); forecast only.
    preemption_grace_seconds: float = 120.0
    # Every team that asks makes progress: a team that holds no GPUs of a flavor has its
    # oldest job protected by the starvation guard even when the gang is bigger than the
    # team's fair share, and reclaim never takes the last running job of a team whose fair
    # share is zero. Without it a team with no guarantee waits for as long as others contend.
    min_one_job: bool = True
    # Reclaim beyond the claimant's guarantee (for its fair share above it) takes only jobs
    # that ran at least this long; reclaim within a guarantee keeps min_runtime_seconds.
    # Hysteresis: shares move with every team's demand, and without it borrowed GPUs change
    # hands thousands of times in a Philly replay. 4 h rather than a checkpoint period (30
    # min): most borrowed jobs end by then on their own, and a gang that waits for them
    # costs less than the work lost and requeued (docs/benchmarks.md: at 80 % load the mean
    # delay 46.4 -> 39.5 h, Jain 0.917 -> 0.940).
    reclaim_min_runtime_seconds: float = 4 * 3600.0
    # Time-based fair share (usage.py). Used only when the snapshot also carries
    # `share_balance` (the live cycle and the trace replay give it when this is on; without
    # it the rules above apply whatever this says). With `min_one_job`: a team
    # that holds nothing of a flavor and is not in debt (balance >= -share_slice_seconds / 2 x
    # its oldest gang's GPUs) has that job starving at once (ahead of the other starving jobs
    # when the team has no guarantee, ordering.py) and lets it reclaim borrowed GPUs,
    # instead of waiting an hour and then for a node to drain; a team in debt by
    # share_slice_seconds x the GPUs of its last job loses that job's protection, and its
    # oldest job waits until the balance recovers. A team whose share is a fraction of a GPU
    # then holds a GPU about that fraction of the time.
    time_based_share: bool = True
    share_slice_seconds: float = 3600.0
    # And a team in debt by this many seconds of max(its fair share, the job's GPUs) takes no
    # free GPU of an empty node beyond its share (engine.py, step 4b): every empty
    # node stays whole for the 8-GPU jobs and gangs that need one, while the team's small jobs
    # still fill GPUs that no one else can use now, except while another team waits within its
    # guarantee (then it borrows nothing). Borrowing nothing at all left GPUs idle
    # and a small team's one-GPU jobs waiting for days (docs/benchmarks.md, "What each rule
    # costs"). 8 h: with 1 h, the mean delay at 120 % load rose above half of strict FIFO's.
    share_borrow_debt_seconds: float = 28800.0
    # How fast a balance is forgotten: the half-life its producer (ShareBalance) decays it with.
    share_half_life_seconds: float = 86400.0
    # A team's turn (ordering.py, rule 1b): once its oldest job at its top priority has waited
    # starvation_seconds, the team's newer jobs of no higher priority start only while they
    # leave that job room under the team's limit. Without it a gang at its team's limit waits
    # for as long as the team's newer, smaller jobs keep coming.
    hold_for_older: bool = True
    # A gang that prefers one domain of a topology level holds out for one this long after its
    # submission, or after its last requeue (`PendingJob.requeued_at`: a preempted gang would
    # otherwise restart anywhere at once), as Slurm's --switches=N@max-time, then takes the
    # next level out, or any nodes. 0: it takes what fits at once.
    topology_patience_seconds: float = 3600.0
    # Past its patience a starving gang that one domain could hold has the domain expected to
    # free soonest reserved for it (engine.py, `_holds_out`); when it could start now on several
    # domains, it waits for that one only if it is expected within this long, and within
    # topology_split_cost times its runtime (its max runtime, else its predicted one): waiting
    # costs the gang the wait, splitting costs it the slowdown over its whole run, so a short
    # gang splits sooner than a long one. On the Philly replay on racks, 16 h and 1 put 97 % of
    # gangs in one rack, the mean delay 7 % under the replay without levels and the maximum
    # 12.5 % over it (docs/benchmarks.md).
    topology_reserve_seconds: float = 16 * 3600.0
    # The share of its runtime a gang split across domains is taken to lose (1: it runs twice
    # as long; across spine switches NCCL runs at a fraction of one rack's speed). 0: only
    # topology_reserve_seconds bounds the wait.
    topology_split_cost: float = 1.0
    # The target workload of the fragmentation strategy (fragmentation.Workload: task shapes and
    # how often they occur, e.g. from a trace); None: the shapes of the snapshot's jobs.
    workload: Workload | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    running: tuple[RunningJob, ...]
    pending: tuple[PendingJob, ...]
    # Per (team, flavor): GPU-seconds of fair share received less than entitled over time,
    # decayed (usage.py; positive: owed, negative: in debt). None: no history, and the rules
    # that read it stay off (Policy.share_slice_seconds).
    share_balance: Mapping[tuple[str, str], float] | None = None
    # Flavors whose GPUs fractional jobs may share; a fractional job of another never fits.
    shared_flavors: frozenset[str] = frozenset()
    # Of those, the flavors whose GPUs each serve one team: a DRA flavor's sharers of a device
    # share one ResourceClaim, which lives in one namespace (gpuqueue/cluster/dra_sharing.py).
    team_gpu_flavors: frozenset[str] = frozenset()
    # Flavor -> its topology levels, node label keys outermost first (a block, a rack, an
    # NVLink domain, kubernetes.io/hostname), as Kueue's Topology lists them (topology.py).
    topologies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class ReasonCode(str, Enum):  # noqa: UP042 -- callers compare and str() these as is
    OVER_LIMIT = "over_limit"  # the team's limit would be exceeded
    NO_QUOTA = "no_quota"  # the team has no quota for this flavor
    NO_CAPACITY = "no_capacity"  # not enough free GPUs for the whole gang
    OVER_FAIR_SHARE = "over_fair_share"  # non-preemptible beyond guarantee, or beyond share
    WAITING_FOR_PREEMPTION = "waiting_for_preemption"
    BEHIND_RESERVATION = "behind_reservation"
    QUEUED_BEHIND_TEAM = "queued_behind_team"  # earlier jobs of the team go first
    NEVER_FITS = "never_fits"  # no node of the flavor is big enough for one worker
    RESERVED = "reserved"  # starving: holds nodes that are draining for it (see Reservation)
    # Time-based fair share: the team used so much more than its fair share lately that it may
    # borrow beyond it only on nodes already in use, and they have no room, or another team
    # waits within its guarantee (engine.py, step 4b; usage.py).
    IN_SHARE_DEBT = "in_share_debt"
    # Within its guarantee, but the borrowed GPUs it could reclaim are held by jobs inside
    # their minimum runtime (reclaim_wait.py).
    WAITING_FOR_RECLAIM = "waiting_for_reclaim"
    # The team's older job has its turn (ordering.py, rule 1b): this newer job of the team
    # would leave it no room under the team's limit.
    HELD_FOR_OLDER = "held_for_older"
    # It requires one domain of a topology level and no domain holds it now (or ever).
    NO_DOMAIN = "no_domain"


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a job is pending, as data with numbers; the web layer turns it into a sentence."""

    code: ReasonCode
    numbers: Mapping[str, int | float | str] = field(default_factory=dict)
    job_ids: tuple[int, ...] = ()  # the jobs waited on (victims, a reservation's holder)


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: int
    placement: Placement
    borrowed: bool = False  # uses capacity above the team's fair share
    # A fractional admission: (node, GPU index 0..capacity-1 on that node) per worker, sorted.
    devices: tuple[tuple[str, int], ...] = ()
    # A job with a topology level: the domain its gang went to, as "label=value" of the
    # innermost level that holds all of it ("" when it spans every level, or has none).
    domain: str = ""
    # A gang of pods of different asks (`PendingJob.pods`): each pod's node, in pod order.
    pods: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Preemption:
    job_id: int
    for_job_id: int
    reason: str  # "priority" (within a team) or "reclaim" (across teams) or "reservation"


@dataclass(frozen=True, slots=True)
class Pending:
    job_id: int
    reason: Reason
    team_position: int  # 1-based position in its team's queue
    cluster_position: int  # 1-based position cluster-wide


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: int
    placement: Placement
    expected_start: float


@dataclass(frozen=True, slots=True)
class Plan:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    pending: tuple[Pending, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    # Jobs being preempted for a job (RunningJob.preempted_for) whose GPUs no job claims any
    # more (their preemptor started elsewhere, or left): they keep running, if they have not
    # stopped yet, instead of losing work that nobody needs.
    withdrawals: tuple[int, ...] = ()
    # Fair share per (team, flavor), for the dashboard and metrics.
    fair_shares: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # Until when the same snapshot at a later time gives this plan (horizon.py); not part of
    # what a plan decides, so plans compare equal without it.
    stable_until: float = field(default=-math.inf, compare=False)
    # The comparisons of share balances with bounds the plan made: ((team, flavor), bound) ->
    # whether the balance was below it (horizon.py). Other balances that give the same
    # answers give the same plan.
    balance_checks: Mapping[tuple[Any, float], bool] = field(default_factory=dict, compare=False)
