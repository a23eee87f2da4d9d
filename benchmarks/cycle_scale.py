"""The admission cycle at production scale, on the real embedded PostgreSQL. Prints numbers;
not a test.

    .venv/bin/python benchmarks/cycle_scale.py                    # the wave scene
    .venv/bin/python benchmarks/cycle_scale.py --scene large      # 100,000 pending, 3 flavors
    .venv/bin/python benchmarks/cycle_scale.py --nodes 500 --pending 5000   # smaller

Scenes:
- `wave`: 5,000 nodes × 8 H100 of the simulated cluster, 30 teams whose guarantees add up to
  the cluster (limits: all of it), 50,000 pending jobs inserted in bulk (60 % one GPU, 30 %
  2-8 GPUs on one node, 10 % gangs of 2-8 workers × 8 GPUs). The first cycle admits a wave of
  thousands of jobs; the next ones find nothing changed.
- `large`: 11,000 nodes of three flavors (8,000 × 8 H100, 2,000 × 8 A100, 1,000 × 4 L4) and
  100,000 pending jobs spread over them.

Then `run_cycle()` --cycles times, each followed by a cluster sync of the simulated backend
(which launches nothing itself: launching is the cycle's phase after the commit). Each cycle's
phases are printed as the cycle times them: lock, snapshot, plan ("kept" when the last plan
still held: gpuqueue/cycle/kept_plan.py), persist, their sum ("admitted by": the admission
transaction commits), then launch and explain (reasons and positions) after the commit; with
a calibration figure of the machine, the time of `sum(range(10**6))`, so that results from
different machines compare.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kube_scale import H100, calibration, start_services  # noqa: E402

SCENES: dict[str, dict[str, Any]] = {
    "wave": {"flavors": [("h100", 5000, 8)], "pending": 50_000, "teams": 30},
    "large": {
        "flavors": [("h100", 8000, 8), ("a100", 2000, 8), ("l4", 1000, 4)],
        "pending": 100_000,
        "teams": 30,
    },
}
PRODUCTS = {
    "h100": H100["nvidia.com/gpu.product"],
    "a100": "NVIDIA-A100-SXM4-80GB",
    "l4": "NVIDIA-L4",
}


def cluster_file(path: Path, flavors: list[tuple[str, int, int]]) -> Path:
    import yaml

    nodes = [
        {
            "name": f"{name}-{{i}}",
            "count": count,
            "labels": {"nvidia.com/gpu.product": PRODUCTS[name]},
            "capacity": {"nvidia.com/gpu": gpus},
        }
        for name, count, gpus in flavors
    ]
    path.write_text(yaml.safe_dump({"nodes": nodes}))
    return path


@contextmanager
def simulated_services(prefix: str, flavors: list[tuple[str, int, int]]) -> Iterator[None]:
    """PostgreSQL and Redis in a temporary folder, the simulated backend on a cluster of
    `flavors`; everything stopped and removed after."""
    import os

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        os.environ["GPUQUEUE_SIM_CLUSTER"] = str(cluster_file(Path(tmp) / "cluster.yaml", flavors))
        os.environ["GPUQUEUE_CLUSTER_BACKEND"] = "simulated"
        servers = start_services(Path(tmp))
        try:
            yield
        finally:
            for server in reversed(servers):
                server.stop()


def shape(rng: random.Random, node_gpus: int) -> tuple[int, int]:
    """(workers, GPUs per worker): 60 % one GPU, 30 % 2-8 on one node, 10 % gangs of × 8."""
    draw = rng.random()
    if draw < 0.6:
        return 1, 1
    if draw < 0.9:
        return 1, rng.choice([g for g in (2, 4, 8) if g <= node_gpus])
    return rng.randint(2, 8), node_gpus


def build_world(flavors: list[tuple[str, int, int]], teams: int, pending: int, seed: int) -> None:
    """Flavors, teams with quotas, one user, the node inventory, and `pending` jobs in bulk."""
    from django.contrib.auth import get_user_model

    from gpuqueue.cluster.simulated import SimulatedBackend
    from gpuqueue.core.states import JobState
    from gpuqueue.cycle.cluster_sync import sync_cluster
    from gpuqueue.models import Flavor, Job, Quota
    from teams.models import Membership, Role, Team

    user = get_user_model().objects.create_user("bench", "bench@example.com", "x")
    made_flavors = []
    for name, count, gpus in flavors:
        flavor = Flavor.objects.create(
            name=name,
            resource_name="nvidia.com/gpu",
            node_selector={"nvidia.com/gpu.product": PRODUCTS[name]},
        )
        made_flavors.append((flavor, count * gpus, gpus))
    made_teams = []
    for t in range(teams):
        team = Team.objects.create(
            slug=f"team-{t:02d}", name=f"Team {t}", namespace=f"team-{t:02d}"
        )
        Membership.objects.create(user=user, team=team, role=Role.MEMBER)
        for flavor, capacity, _ in made_flavors:
            Quota.objects.create(
                team=team, flavor=flavor, guarantee=capacity // teams, limit=capacity, weight=1.0
            )
        made_teams.append(team)
    sync_cluster(SimulatedBackend.from_settings())
    rng = random.Random(seed)
    rows = []
    for i in range(pending):
        flavor, _, node_gpus = made_flavors[i % len(made_flavors)]
        workers, gpus = shape(rng, node_gpus)
        rows.append(
            Job(
                team=made_teams[i % teams],
                user=user,
                name=f"job-{i}",
                image="bench:1",
                flavor=flavor,
                workers=workers,
                gpus_per_worker=gpus,
                state=JobState.PENDING,
                annotations={"gpuqueue.dev/sim-duration-seconds": "36000"},
            )
        )
    Job.objects.bulk_create(rows, batch_size=1000)  # one statement holds at most 65,535 parameters


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scene", choices=sorted(SCENES), default="wave")
    parser.add_argument("--nodes", type=int, help="nodes of the first flavor (scaled scene)")
    parser.add_argument("--pending", type=int, help="pending jobs (scaled scene)")
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    scene = dict(SCENES[args.scene])
    flavors = list(scene["flavors"])
    if args.nodes:
        flavors[0] = (flavors[0][0], args.nodes, flavors[0][2])
    pending = args.pending or scene["pending"]
    # Pods run at once (unless set otherwise): the sync after the wave sees every launched gang
    # running, whatever the wave took (with a startup, a quicker wave would leave that to a
    # later cycle).
    os.environ.setdefault("GPUQUEUE_SIM_STARTUP_SECONDS", "0")
    with simulated_services("gq-cycle-", flavors):
        return run(args, flavors, scene["teams"], pending)


def run(
    args: argparse.Namespace, flavors: list[tuple[str, int, int]], teams: int, pending: int
) -> int:
    from gpuqueue.cluster.simulated import SimulatedBackend
    from gpuqueue.core.states import JobState
    from gpuqueue.cycle.cluster_sync import sync_cluster
    from gpuqueue.cycle.run import run_cycle
    from gpuqueue.models import Job

    started = time.perf_counter()
    build_world(flavors, teams, pending, args.seed)
    nodes = sum(count for _, count, _ in flavors)
    gpus = sum(count * per for _, count, per in flavors)
    print(
        f"cycle_scale {args.scene}: {nodes:,} nodes, {gpus:,} GPUs, {teams} teams, "
        f"{pending:,} pending (built in {time.perf_counter() - started:.1f} s); "
        f"calibration sum(range(10**6)) = {calibration() * 1000:.1f} ms",
        flush=True,
    )
    backend = SimulatedBackend.from_settings()
    print(
        "| cycle | admitted | preempted | lock | snapshot | plan | persist | **admitted by** | "
        "launch | explain | total | pending after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for n in range(1, args.cycles + 1):
        t0 = time.perf_counter()
        result = run_cycle(backend=backend)
        total = time.perf_counter() - t0
        t = result.phase_seconds
        left = Job.objects.filter(state=JobState.PENDING).count()
        phases = ("1_lock", "2_snapshot", "3_plan", "4_persist", "5_apply", "6_explain")
        row = {
            "cycle": n,
            "admitted": len(result.admitted),
            "preempted": len(result.preempted),
            "kept_plan": result.kept_plan,
            **{k: t.get(k) for k in phases},
            # The admission transaction: when the decisions are committed (and launching starts).
            "admitted_by": round(sum(t.get(k, 0.0) for k in phases[:4]), 3),
            "total": round(total, 3),
            "pending_after": left,
        }
        results.append(row)
        plan = "kept" if result.kept_plan else _s(row["3_plan"])
        print(
            f"| {n} | {row['admitted']:,} | {row['preempted']:,} | {_s(row['1_lock'])} | "
            f"{_s(row['2_snapshot'])} | "
            f"{plan} | {_s(row['4_persist'])} | **{_s(row['admitted_by'])}** | "
            f"{_s(row['5_apply'])} | {_s(row['6_explain'])} | {total:.2f} s | {left:,} |",
            flush=True,
        )
        sync_cluster(backend)
    from collections import Counter

    reasons = Counter(
        Job.objects.filter(state=JobState.PENDING).values_list("standing__reason__code", flat=True)
    )
    print("pending reasons:", dict(reasons.most_common(5)))
    print(json.dumps({"scene": args.scene, "cycles": results}))
    return 0


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


if __name__ == "__main__":
    sys.exit(main())
