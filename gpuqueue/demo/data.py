"""Demo data for the embedded mode (docs/architecture.md, scenario 12): teams, people,
flavors, quotas, and a trickle of jobs shaped like the Philly trace (mostly single GPUs, a few
large gangs)."""

from __future__ import annotations

import random

from django.contrib.auth import get_user_model
from django.db import transaction

from gpuqueue.core.gpu_idle import PROFILE_ANNOTATION
from gpuqueue.core.states import JobState
from gpuqueue.demo.accounts import DEMO_USERS, ROOT
from gpuqueue.models import Flavor, Job, Quota
from gpuqueue.services.jobs.submit import submit_job
from teams.models import Membership, Team

# name, resource, node selector, description, CPU millicores and memory MiB per GPU
FLAVORS = [
    (
        "h100",
        "nvidia.com/gpu",
        {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "H100 80GB",
        12000,
        98304,
    ),
    ("l4", "nvidia.com/gpu", {"nvidia.com/gpu.product": "NVIDIA-L4"}, "L4 24GB", 4000, 16384),
    ("mig-1g-10gb", "nvidia.com/mig-1g.10gb", {}, "A100 MIG slice, 10GB", 1000, 8192),
]
TEAMS = [
    (
        "team-a",
        "Vision research",
        {"h100": (24, 64, 1.0), "l4": (8, 16, 1.0), "mig-1g-10gb": (2, 7, 1.0)},
    ),
    (
        "team-b",
        "Language models",
        {"h100": (24, 64, 1.0), "l4": (4, 16, 1.0), "mig-1g-10gb": (2, 7, 1.0)},
    ),
    (
        "inference",
        "Production inference",
        {"h100": (8, 16, 0.5), "l4": (4, 16, 1.0), "mig-1g-10gb": (3, 7, 1.0)},
    ),
]


@transaction.atomic
def seed_demo() -> bool:
    """Create the demo world once; returns False when it already exists."""
    User = get_user_model()
    if User.objects.filter(username=ROOT[0]).exists():
        return False
    User.objects.create_superuser(ROOT[0], f"{ROOT[0]}@example.com", ROOT[1])
    flavors = {}
    for name, resource, selector, description, cpu, memory in FLAVORS:
        flavors[name], _ = Flavor.objects.get_or_create(
            name=name,
            defaults={
                "resource_name": resource,
                "node_selector": selector,
                "description": description,
                "cpu_millicores_per_gpu": cpu,
                "memory_mib_per_gpu": memory,
            },
        )
    teams = {}
    for slug, title, quotas in TEAMS:
        teams[slug], _ = Team.objects.get_or_create(
            slug=slug, defaults={"name": title, "namespace": slug}
        )
        for flavor, (guarantee, limit, weight) in quotas.items():
            Quota.objects.get_or_create(
                team=teams[slug],
                flavor=flavors[flavor],
                defaults={"guarantee": guarantee, "limit": limit, "weight": weight},
            )
    for username, password, team, role in DEMO_USERS:
        user = User.objects.create_user(username, f"{username}@example.com", password)
        Membership.objects.create(user=user, team=teams[team], role=role)
    return True


# Philly-like shapes: (weight, workers, gpus per worker, flavor).
SHAPES = [
    (60, 1, 1, "h100"),
    (10, 1, 1, "l4"),
    (8, 1, 1, "mig-1g-10gb"),
    (8, 1, 2, "h100"),
    (6, 1, 4, "h100"),
    (4, 1, 8, "h100"),
    (3, 2, 8, "h100"),
    (1, 4, 8, "h100"),
]
DEMO_NAMES = ["resnet", "llama-ft", "bert", "sweep", "eval"]
# Simulated GPU utilization (gpuqueue/core/gpu_idle.py): most demo jobs keep their GPUs busy;
# one in five drops to 2 % after ten minutes, and is flagged idle if it runs long enough.
UTILIZATION_PROFILES = ["92,88", "85,80,75", "70", "95", "60,2"]
MAX_PENDING = 40  # keep the demo queue lively but bounded


def submit_demo_traffic(rng: random.Random | None = None) -> int:
    """Submit a few demo jobs (called every 10 s by beat); returns how many."""
    from django.conf import settings

    rng = rng or random.Random()
    if Job.objects.filter(state=JobState.PENDING).count() >= MAX_PENDING:
        return 0
    expected = settings.GPUQUEUE_DEMO_JOBS_PER_MINUTE / 6
    count = int(expected) + (1 if rng.random() < expected - int(expected) else 0)
    members = list(Membership.objects.select_related("user", "team"))
    flavors = {f.name: f for f in Flavor.objects.all()}
    if not members or not flavors:
        return 0
    weights = [s[0] for s in SHAPES]
    for _ in range(count):
        membership = rng.choice(members)
        _, workers, gpus, flavor = rng.choices(SHAPES, weights)[0]
        if flavor not in flavors:
            continue
        duration = int(rng.lognormvariate(4.5, 0.8))  # median ~90 s, a long tail
        submit_job(
            membership.user,
            membership.team,
            flavors[flavor],
            {
                "name": f"demo-{rng.choice(DEMO_NAMES)}-{rng.randrange(1000)}",
                "image": "ghcr.io/gpuqueue/demo-train:1.0",
                "command": ["python", "train.py"],
                "workers": workers,
                "gpus_per_worker": gpus,
                "priority": rng.choice([0, 0, 0, 10]),
                "preemptible": rng.random() < 0.85,
                "annotations": {
                    "gpuqueue.dev/sim-duration-seconds": str(max(10, duration)),
                    # Taken from the duration, not drawn: the demo's random sequence is kept.
                    PROFILE_ANNOTATION: UTILIZATION_PROFILES[duration % len(UTILIZATION_PROFILES)],
                },
            },
        )
    return count
