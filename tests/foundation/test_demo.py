"""The embedded mode's demo world (docs/architecture.md, scenario 12): seeded once, and a
trickle of jobs that the default simulated cluster can actually run."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from gpuqueue.cluster.simulated import SimulatedBackend
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.demo.data import MAX_PENDING, seed_demo, submit_demo_traffic
from gpuqueue.models import Job, Node
from teams.models import Membership


@pytest.fixture
def demo_cluster(settings: Any) -> SimulatedBackend:
    from gpuqueue.cluster import get_backend

    get_backend.cache_clear()
    path = Path(django_settings.BASE_DIR) / "gpuqueue" / "cluster" / "default_cluster.yaml"
    settings.GPUQUEUE_SIM_CLUSTER = str(path)
    return SimulatedBackend(path, startup_seconds=0, checkpoint_seconds=0)


def test_the_demo_world_is_seeded_once(db: Any) -> None:
    assert seed_demo() is True
    assert seed_demo() is False
    roles = set(Membership.objects.values_list("user__username", "team__slug", "role"))
    assert ("alice", "team-a", "member") in roles and ("bob", "team-a", "admin") in roles


def test_demo_traffic_submits_jobs_the_default_cluster_runs(
    db: Any, settings: Any, demo_cluster: SimulatedBackend
) -> None:
    settings.GPUQUEUE_DEMO_JOBS_PER_MINUTE = 60  # ten per call
    seed_demo()
    sync_cluster(demo_cluster)
    rng = random.Random(7)
    assert submit_demo_traffic(rng) == 10
    assert Job.objects.count() == 10
    run_cycle(backend=demo_cluster)
    states = set(Job.objects.values_list("state", flat=True))
    assert JobState.ADMITTED in states
    # No demo job is refused as unschedulable: every shape fits some node of its flavor.
    assert not Job.objects.filter(standing__reason__code="never_fits").exists()


def test_the_default_clusters_nodes_reach_the_database_with_cpu_memory_and_pods(
    db: Any, demo_cluster: SimulatedBackend
) -> None:
    sync_cluster(demo_cluster)
    h100 = Node.objects.get(name="h100-0")
    assert (h100.allocatable_cpu_millicores, h100.allocatable_memory_bytes) == (224_000, 2000 << 30)
    assert (h100.allocatable_pods, h100.external_pods) == (110, 6)
    assert (h100.external_cpu_millicores, h100.external_memory_bytes) == (2_500, 8 << 30)


def test_demo_traffic_pauses_while_the_queue_is_long(db: Any, settings: Any) -> None:
    settings.GPUQUEUE_DEMO_JOBS_PER_MINUTE = 600
    seed_demo()
    rng = random.Random(1)
    while Job.objects.filter(state=JobState.PENDING).count() < MAX_PENDING:
        submit_demo_traffic(rng)
    before = Job.objects.count()
    assert submit_demo_traffic(rng) == 0
    assert Job.objects.count() == before
