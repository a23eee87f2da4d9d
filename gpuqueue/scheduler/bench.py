"""Benchmark: `python -m gpuqueue.scheduler.bench [--scenario large|limited|reclaim|all] [...]`.

Builds seeded snapshots and prints one JSON line per scenario with the median seconds of plan()
over several runs (snapshot building is not timed), and a digest of the plan's decisions (the
same before and after a change that should only make it faster). Scenarios, named by their
size:

- large: 5,000 nodes x 8 GPUs in 3 flavors, 30 teams, 20,000 running and 50,000 pending jobs
  with gangs of 1-16 workers;
- limited: the same, with every node's CPU, memory and pods (224 CPUs, 2,000 GiB, 110 pods, a
  few requested by others) and every worker asking 12 CPUs and 96 GiB per GPU, as a
  Kubernetes cluster reports them: placement also checks each node's room besides GPUs;
- reclaim: 1,000 nodes x 8 GPUs all borrowed by one team while 10 teams under their guarantees
  submit gangs of 8-64 GPUs;
- topology: `large` with three levels on every flavor (blocks of 8 racks, racks of 16 nodes,
  the host), every gang of several workers preferring one rack and one in four of them
  requiring it.

The target is a median of at most 0.5 s for each on one core. `--no-memo` plans with every memo
of the engine off (engine.Cycle), to show what they save.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace

from gpuqueue.scheduler.engine import Cycle
from gpuqueue.scheduler.model import (
    Node,
    PendingJob,
    Plan,
    Policy,
    Quota,
    RunningJob,
    Snapshot,
    Team,
)
from gpuqueue.scheduler.runtime import paused_gc

NOW = 1_000_000.0
FLAVORS = (("h100", 0.5), ("a100", 0.3), ("l4", 0.2))


def large(nodes: int, teams: int, running: int, pending: int, seed: int) -> Snapshot:
    """A busy three-flavor cluster: mostly small jobs running, a long mixed queue."""
    rng = random.Random(seed)
    node_list: list[Node] = []
    by_flavor: dict[str, list[str]] = {f: [] for f, _ in FLAVORS}
    for i in range(nodes):
        flavor = rng.choices([f for f, _ in FLAVORS], [w for _, w in FLAVORS])[0]
        name = f"node-{i:05d}"
        node_list.append(Node(name, {flavor: 8}, schedulable=rng.random() > 0.01))
        by_flavor[flavor].append(name)
    team_ids = [f"team-{t:02d}" for t in range(teams)]
    team_list = []
    for t in team_ids:
        quotas = {}
        for flavor, _ in FLAVORS:
            capacity = 8 * len(by_flavor[flavor])
            guarantee = int(capacity * 0.8 / teams)
            quotas[flavor] = Quota(guarantee, guarantee * 4, float(rng.choice((1, 1, 2, 3))))
        team_list.append(Team(t, quotas))
    free = {n.name: 8 for n in node_list}
    run_list: list[RunningJob] = []
    for job_id in range(1, running + 1):
        flavor = rng.choices([f for f, _ in FLAVORS], [w for _, w in FLAVORS])[0]
        gpus = rng.choice((1, 1, 1, 2))
        if not by_flavor[flavor]:
            continue  # a small cluster may have no node of the flavor
        for _ in range(8):
            name = rng.choice(by_flavor[flavor])
            if free[name] >= gpus:
                break
        else:
            continue
        free[name] -= gpus
        started = NOW - rng.uniform(0, 8 * 3600)
        run_list.append(
            RunningJob(
                id=job_id,
                team=rng.choice(team_ids),
                user=f"user-{rng.randrange(5)}",
                flavor=flavor,
                gpus_per_worker=gpus,
                placement=((name, 1),),
                priority=rng.randrange(4),
                preemptible=rng.random() < 0.8,
                started_at=started,
                max_runtime=rng.choice((None, 4 * 3600.0, 12 * 3600.0)),
            )
        )
    pend_list = [
        _pending(rng, running + 1 + i, rng.choice(team_ids), _flavor(rng)) for i in range(pending)
    ]
    return Snapshot(NOW, tuple(node_list), tuple(team_list), tuple(run_list), tuple(pend_list))


CPU_PER_GPU, MEMORY_PER_GPU = 12_000, 96 << 30  # millicores, bytes


def limited(nodes: int, teams: int, running: int, pending: int, seed: int) -> Snapshot:
    snapshot = large(nodes, teams, running, pending, seed)
    return replace(
        snapshot,
        nodes=tuple(
            replace(
                n,
                cpu=224_000,
                memory=2000 << 30,
                pods=110,
                cpu_used_externally=2_500,
                memory_used_externally=8 << 30,
                pods_used_externally=6,
            )
            for n in snapshot.nodes
        ),
        running=tuple(
            replace(
                j,
                cpu_per_worker=CPU_PER_GPU * j.gpus_per_worker,
                memory_per_worker=MEMORY_PER_GPU * j.gpus_per_worker,
            )
            for j in snapshot.running
        ),
        pending=tuple(
            replace(
                j,
                cpu_per_worker=CPU_PER_GPU * j.gpus_per_worker,
                memory_per_worker=MEMORY_PER_GPU * j.gpus_per_worker,
            )
            for j in snapshot.pending
        ),
    )


def _flavor(rng: random.Random) -> str:
    return rng.choices([f for f, _ in FLAVORS], [w for _, w in FLAVORS])[0]


def _pending(rng: random.Random, job_id: int, team: str, flavor: str) -> PendingJob:
    workers = rng.choices((1, 2, 4, 8, 16), (60, 15, 12, 8, 5))[0]
    gpus = rng.choices((1, 2, 4, 8), (50, 20, 20, 10))[0]
    return PendingJob(
        id=job_id,
        team=team,
        user=f"user-{rng.randrange(5)}",
        flavor=flavor,
        workers=workers,
        gpus_per_worker=gpus,
        priority=rng.randrange(4),
        preemptible=rng.random() < 0.9,
        submitted_at=NOW - rng.uniform(0, 4000),  # a few past the default starvation hour
        max_runtime=rng.choice((None, 1800.0, 4 * 3600.0)),
    )


def reclaim(nodes: int, teams: int, running: int, pending: int, seed: int) -> Snapshot:
    """One team has borrowed the whole flavor; `teams` teams under guarantee want it back."""
    rng = random.Random(seed)
    node_list = tuple(Node(f"node-{i:05d}", {"h100": 8}) for i in range(nodes))
    capacity = 8 * nodes
    guarantee = int(capacity * 0.9 / teams)
    team_list = [Team("hog", {"h100": Quota(0, capacity)})]
    team_list += [Team(f"team-{t:02d}", {"h100": Quota(guarantee, capacity)}) for t in range(teams)]
    run_list: list[RunningJob] = []
    job_id = 0
    for n in node_list:
        left = 8
        while left:
            gpus = min(left, rng.choice((1, 2, 4, 8)))
            left -= gpus
            job_id += 1
            run_list.append(
                RunningJob(
                    id=job_id,
                    team="hog",
                    user=f"user-{rng.randrange(5)}",
                    flavor="h100",
                    gpus_per_worker=gpus,
                    placement=((n.name, 1),),
                    priority=rng.randrange(3),
                    preemptible=True,
                    started_at=NOW - rng.uniform(600, 8 * 3600),
                    max_runtime=12 * 3600.0,
                )
            )
    pend_list = []
    for i in range(pending):
        workers, gpus = rng.choice(((1, 8), (2, 8), (4, 8), (8, 8), (4, 4), (8, 4), (16, 4)))
        pend_list.append(
            PendingJob(
                id=job_id + 1 + i,
                team=f"team-{rng.randrange(teams):02d}",
                user=f"user-{rng.randrange(5)}",
                flavor="h100",
                workers=workers,
                gpus_per_worker=gpus,
                priority=rng.randrange(3),
                preemptible=rng.random() < 0.5,
                submitted_at=NOW - rng.uniform(0, 1800),
            )
        )
    return Snapshot(NOW, node_list, tuple(team_list), tuple(run_list), tuple(pend_list))


BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"


def topology(nodes: int, teams: int, running: int, pending: int, seed: int) -> Snapshot:
    snapshot = large(nodes, teams, running, pending, seed)
    rng = random.Random(seed + 1)
    return replace(
        snapshot,
        nodes=tuple(
            replace(n, labels={BLOCK: f"b{i // 128}", RACK: f"r{i // 16}", HOST: n.name})
            for i, n in enumerate(snapshot.nodes)
        ),
        pending=tuple(
            replace(j, topology_level=RACK, topology_required=rng.random() < 0.25)
            if j.workers > 1
            else j
            for j in snapshot.pending
        ),
        topologies={flavor: (BLOCK, RACK, HOST) for flavor, _ in FLAVORS},
    )


SCENARIOS = {
    # name: (builder, nodes, teams, running, pending)
    "large": (large, 5000, 30, 20000, 50000),
    "topology": (topology, 5000, 30, 20000, 50000),
    "limited": (limited, 5000, 30, 20000, 50000),
    "reclaim": (reclaim, 1000, 10, 0, 200),
}


def measure(name: str, args: argparse.Namespace) -> dict[str, object]:
    builder, nodes, teams, running, pending = SCENARIOS[name]
    nodes = args.nodes or nodes
    teams = args.teams or teams
    running = args.running if args.running is not None else running
    pending = args.pending if args.pending is not None else pending
    started = time.perf_counter()
    snapshot = builder(nodes, teams, running, pending, args.seed)
    built = time.perf_counter() - started
    policy = Policy()
    memo = not args.no_memo

    def plan(snapshot: Snapshot, policy: Policy) -> Plan:
        return Cycle(snapshot, policy, memo).run()

    times = []
    cpu = []
    result = plan(snapshot, policy)  # a warm-up run, not counted
    gc_on = []
    for _ in range(args.runs):
        # The cycle never holds the last plan while making the next; holding it here would
        # only add 50,000 live objects for the garbage collector to walk.
        del result
        # As the admission cycle runs it: the cyclic collector paused (runtime.py says why).
        with paused_gc():
            started, started_cpu = time.perf_counter(), time.process_time()
            result = plan(snapshot, policy)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
        # And with the collector left on, for comparison.
        del result
        started = time.perf_counter()
        result = plan(snapshot, policy)
        gc_on.append(time.perf_counter() - started)
    return {
        "scenario": name,
        "nodes": nodes,
        "gpus": sum(sum(n.capacity.values()) for n in snapshot.nodes),
        "teams": len(snapshot.teams),
        "running": len(snapshot.running),
        "pending": len(snapshot.pending),
        "seed": args.seed,
        "memo": memo,
        "runs": args.runs,
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "median_gc_on_s": round(statistics.median(gc_on), 4),
        # CPU seconds of this process: on a shared machine the wall clock also counts waiting.
        "median_cpu_s": round(statistics.median(cpu), 4),
        "build_s": round(built, 3),
        "admitted": len(result.admissions),
        "preempted": len(result.preemptions),
        "reservations": len(result.reservations),
        "decisions": digest(result),
    }


def digest(result: Plan) -> str:
    """A short hash of every decision of a plan (admissions, preemptions, reasons and
    positions, reservations, withdrawals, fair shares), to check that a faster engine decides
    the same."""
    decided = (
        # Each admission's fields, `pods` only where given: a field that a plan's jobs do not
        # use leaves the digest of the same decisions alone.
        tuple(
            (a.job_id, a.placement, a.borrowed, a.devices, a.domain, *((a.pods,) if a.pods else ()))
            for a in result.admissions
        ),
        result.preemptions,
        result.pending,
        result.reservations,
        result.withdrawals,
        sorted(result.fair_shares.items()),
    )
    return hashlib.sha256(repr(decided).encode()).hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--pending", type=int)
    parser.add_argument("--running", type=int)
    parser.add_argument("--teams", type=int)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-memo", action="store_true", help="every memo of the engine off")
    args = parser.parse_args(argv)
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    for name in names:
        print(json.dumps(measure(name, args)), flush=True)


if __name__ == "__main__":
    main()
