"""The cluster sync pass on the real embedded PostgreSQL: right after a wave of one-GPU starts,
then steady with every job running. Prints numbers; not a test.

    .venv/bin/python benchmarks/sync_pass.py                 # 2,000 jobs
    .venv/bin/python benchmarks/sync_pass.py --jobs 800 --passes 15

A cluster of jobs/8 + 1 nodes × 8 H100 (the simulated backend, workloads that start at once),
4 teams, `--jobs` one-GPU jobs admitted by one cycle; then the sync pass that finds them all
started, and `--passes` passes that find nothing new: the CPU of this thread and the wall time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import cycle_scale  # noqa: E402
from kube_scale import calibration  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=10)
    args = parser.parse_args()
    flavors = [("h100", args.jobs // 8 + 1, 8)]
    with cycle_scale.simulated_services("gq-sync-", flavors):
        from gpuqueue.cluster.simulated import SimulatedBackend
        from gpuqueue.core.states import JobState
        from gpuqueue.cycle.cluster_sync import sync_cluster
        from gpuqueue.cycle.run import run_cycle
        from gpuqueue.models import Job

        cycle_scale.shape = lambda rng, node_gpus: (1, 1)  # one GPU each
        cycle_scale.build_world(flavors, 4, args.jobs, 1)
        cluster = SimulatedBackend.from_settings().cluster_file
        backend = SimulatedBackend(cluster, startup_seconds=0, checkpoint_seconds=0)
        run_cycle(backend=backend)

        def timed() -> tuple[float, float]:
            cpu, wall = time.thread_time(), time.perf_counter()
            sync_cluster(backend)
            return time.thread_time() - cpu, time.perf_counter() - wall

        first = timed()
        running = Job.objects.filter(state=JobState.RUNNING).count()
        steady = [timed() for _ in range(args.passes)]
        print(
            f"sync_pass: {running:,} of {args.jobs:,} jobs started; calibration"
            f" sum(range(10**6)) = {calibration() * 1000:.1f} ms"
        )
        print(f"after the wave: CPU {first[0] * 1000:.0f} ms, wall {first[1] * 1000:.0f} ms")
        print(
            f"steady (median of {args.passes}): CPU"
            f" {statistics.median(c for c, _ in steady) * 1000:.0f} ms, wall"
            f" {statistics.median(w for _, w in steady) * 1000:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
