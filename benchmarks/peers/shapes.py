"""The workloads and quotas of the side-by-side benchmark, as plain data: the same for both
systems. Pure (no Django, no Kubernetes), so that the test suite checks what each scenario asks.

- `kai`: KAI Scheduler's scale test. Teams whose guarantees add up to the cluster, every limit
  the whole cluster; --jobs one-GPU jobs round robin, then --gangs gangs of 8 workers × 8 GPUs.
- `baseline`: Kueue's own scheduler performance baseline (test/performance/scheduler/configs/
  baseline in its module: 30 ClusterQueues of nominal quota 20 and borrowing limit 100; per
  queue 350 small workloads of 1 unit running 200 ms, 100 medium of 5 units running 500 ms, 50
  large of 20 units running 1 s; 15,000 in all), scaled to fit kwok nodes of 8 GPUs: a unit is
  a GPU, so 30 × 20 GPUs = 75 nodes; the counts divided by `scale` (10: 1,500 workloads); a
  large workload is a gang of 4 workers × 5 GPUs; runtimes × 10 (kwok counts whole pods'
  lifetimes, and a 200 ms pod is mostly its own start-up). One cohort, as gpuqueue shares
  everything among all teams (the baseline's five cohorts of six would forbid borrowing
  across cohorts, which gpuqueue cannot say); every workload at the same priority, submitted
  at once.
- `contended`: three teams on 16 nodes × 8 GPUs (128): A and B each guaranteed 48, C 32, every
  limit the whole cluster, weight 1. A and B each ask for 128 GPUs (16 jobs of 8) and split
  the cluster (64 each: their guarantee and half of C's idle 32); once every GPU is bound, C
  asks for its guarantee (4 jobs of 8): 16 GPUs must be reclaimed from each of A and B.
"""

from __future__ import annotations

from dataclasses import dataclass

GPUS_PER_NODE = 8
LONG_SECONDS = 36000  # runs through the whole benchmark


@dataclass(frozen=True)
class TeamSpec:
    """A team (its slug is its namespace and its ClusterQueue's name) and its quota of GPUs."""

    slug: str
    guarantee: int
    limit: int
    weight: float = 1.0


@dataclass(frozen=True)
class JobShape:
    team: str
    workers: int
    gpus: int  # per worker
    seconds: float = LONG_SECONDS  # simulated runtime of every pod


@dataclass(frozen=True)
class Phase:
    label: str
    jobs: tuple[JobShape, ...]
    # Submitted once the first wave holds every GPU of the cluster (the contended mix's C).
    later: tuple[JobShape, ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int
    teams: tuple[TeamSpec, ...]
    phases: tuple[Phase, ...]
    grace_seconds: int = 120  # checkpoint grace (gpuqueue) = termination grace (Kueue's pods)


def even_teams(count: int, gpus: int, limit: int | None = None) -> tuple[TeamSpec, ...]:
    """`count` teams whose guarantees add up to `gpus`, each limited to `limit` (all)."""
    return tuple(
        TeamSpec(
            f"team-{i}",
            gpus // count + (1 if i < gpus % count else 0),
            gpus if limit is None else limit,
        )
        for i in range(count)
    )


def kai(nodes: int = 500, jobs: int = 4000, gangs: int = 50, teams: int = 4) -> Scenario:
    specs = even_teams(teams, nodes * GPUS_PER_NODE)
    phases = []
    if jobs:
        single = tuple(JobShape(specs[i % teams].slug, 1, 1) for i in range(jobs))
        phases.append(Phase("single", single))
    if gangs:
        gang = tuple(JobShape(specs[i % teams].slug, 8, 8) for i in range(gangs))
        phases.append(Phase("gangs", gang))
    return Scenario("kai", nodes, specs, tuple(phases))


# Kueue's baseline: (class, per queue, workers, GPUs per worker, runtime in its test)
BASELINE_CLASSES = (
    ("small", 350, 1, 1, 0.2),
    ("medium", 100, 1, 5, 0.5),
    ("large", 50, 4, 5, 1.0),
)
BASELINE_QUEUES = 30
BASELINE_NOMINAL = 20
BASELINE_BORROWING = 100


def baseline(scale: int = 10, runtime_factor: float = 10.0) -> Scenario:
    """Kueue's baseline, its counts divided by `scale`, its runtimes times `runtime_factor`."""
    specs = tuple(
        TeamSpec(f"cq-{i}", BASELINE_NOMINAL, BASELINE_NOMINAL + BASELINE_BORROWING)
        for i in range(BASELINE_QUEUES)
    )
    nodes = BASELINE_QUEUES * BASELINE_NOMINAL // GPUS_PER_NODE
    jobs: list[JobShape] = []
    # Interleaved as Kueue's generator creates them: every queue's sets side by side.
    per_class = [
        [
            JobShape(team.slug, workers, gpus, seconds * runtime_factor)
            for _ in range(count // scale)
        ]
        for _, count, workers, gpus, seconds in BASELINE_CLASSES
        for team in specs
    ]
    longest = max(len(c) for c in per_class)
    for i in range(longest):
        jobs += [c[i] for c in per_class if i < len(c)]
    return Scenario("baseline", nodes, specs, (Phase("baseline", tuple(jobs)),))


def contended(nodes: int = 16, grace_seconds: int = 5) -> Scenario:
    gpus = nodes * GPUS_PER_NODE
    a = b = gpus * 3 // 8
    c = gpus - a - b
    specs = (TeamSpec("team-a", a, gpus), TeamSpec("team-b", b, gpus), TeamSpec("team-c", c, gpus))
    first = tuple(
        JobShape(team, 1, GPUS_PER_NODE) for _ in range(nodes) for team in ("team-a", "team-b")
    )
    later = tuple(JobShape("team-c", 1, GPUS_PER_NODE) for _ in range(c // GPUS_PER_NODE))
    return Scenario("contended", nodes, specs, (Phase("contended", first, later),), grace_seconds)
