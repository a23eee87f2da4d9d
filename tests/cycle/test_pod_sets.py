"""A user's object whose pod sets ask different GPUs per pod, through the real cycle and
PostgreSQL: mirrored with its pod sets and counted in units, planned pod by pod, stored with each
pod's node, and seen by the next plan as each pod's own GPUs, CPU and memory on its node."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.utils import timezone

from gpuqueue.cluster.sources import SourceShape
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.cycle.snapshot import load_snapshot
from gpuqueue.models import Job
from gpuqueue.services.jobs.sources import mirror

GIB_MIB = 1024
SETS = (
    {"name": "head", "pods": 1, "gpus": 1, "cpu_millicores": 4000, "memory_mib": 16 * GIB_MIB},
    {"name": "worker", "pods": 2, "gpus": 8, "cpu_millicores": 32000, "memory_mib": 64 * GIB_MIB},
)


def _shape(**fields: Any) -> SourceShape:
    return SourceShape(
        namespace="team-a",
        name="mixed",
        uid="6f0c7a1e-0000-4000-8000-000000000009",
        team="team-a",
        workers=17,
        gpus_per_worker=1,
        resource_name="nvidia.com/gpu",
        image="rayproject/ray:2.9.0",
        kind="RayJob",
        flavor="h100",
        pod_sets=SETS,
        **fields,
    )


def test_pod_sets_are_mirrored_planned_pod_by_pod_and_held_as_each_pod_s_own(
    world: Any, backend: Any
) -> None:
    sync_cluster(backend)
    mirrored = mirror(_shape())
    job = mirrored.job
    assert job is not None, mirrored.text
    job.refresh_from_db()
    assert (job.workers, job.gpus_per_worker, job.gpus) == (17, 1, 17)
    assert job.pod_sets == list(SETS)
    # Pending, the engine sees its three pods, each with its own ask.
    [pending] = [j for j in load_snapshot(timezone.now()).pending if j.id == job.pk]
    assert (pending.workers, pending.gpus_per_worker, pending.gpus) == (3, 8, 17)
    assert pending.pods == (
        (1, 4000, 16 << 30),
        (8, 32000, 64 << 30),
        (8, 32000, 64 << 30),
    )

    assert job.pk in run_cycle(backend=backend).admitted
    job.refresh_from_db()
    assert job.state != JobState.PENDING
    # Stored in units (1 GPU each) per node, with each pod's node in pod order.
    head, *workers = job.pod_nodes
    assert sum(job.placement.values()) == 17
    assert job.placement[head] >= 1 and all(job.placement[w] >= 8 for w in workers)
    assert job.placement_rows() == sorted(
        (node, job.pod_nodes.count(node), job.placement[node]) for node in job.placement
    )
    # Running, the next plan sees its units and what its pods take on each node.
    [running] = [j for j in load_snapshot(timezone.now()).running if j.id == job.pk]
    assert running.gpus == 17
    assert running.room_on(head, job.placement[head])[0] == 4000 + 32000 * workers.count(head)


def test_a_pod_set_larger_than_any_node_is_refused_with_a_sentence(
    world: Any, backend: Any
) -> None:
    sync_cluster(backend)
    big = replace(_shape(), pod_sets=(SETS[0], {**SETS[1], "pods": 1, "gpus": 16}), workers=17)
    mirrored = mirror(big)
    assert mirrored.job is None
    assert "largest node" in mirrored.text
    assert not Job.objects.exists()


def test_an_amount_past_a_column_s_range_is_refused_with_a_sentence_and_stops_no_pass(
    world: Any, backend: Any
) -> None:
    """A PyTorchJob's or RayJob's template is not checked by the API server as a pod is: a
    worker asking "1e300" CPUs or memory (or a pod set's head doing so) must be refused with a
    sentence, not raise out of the watcher's pass for every team."""
    sync_cluster(backend)
    huge = 10**302
    shapes = (
        replace(_shape(), pod_sets=(), workers=2, gpus_per_worker=8, cpu_millicores=huge),
        replace(_shape(), pod_sets=(), workers=2, gpus_per_worker=8, memory_mib=huge),
        replace(_shape(), pod_sets=({**SETS[0], "cpu_millicores": huge}, SETS[1])),
        replace(_shape(), pod_sets=(SETS[0], {**SETS[1], "memory_mib": huge})),
    )
    for shape, field in zip(shapes, ("cpu_millicores", "memory_mib") * 2, strict=True):
        mirrored = mirror(shape)
        assert mirrored.job is None
        assert mirrored.text.startswith(f"{field}: Ensure this value is less than")
    assert not Job.objects.exists()
