"""Fixtures shared by every test: the personas and a small world to act in.

alice is a member of team-a, bob its admin, carol a member of team-b, root the site admin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

CLUSTER_YAML = """
nodes:
  - name: h100-{i}
    count: 4
    labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
    capacity: {nvidia.com/gpu: 8}
  - name: l4-{i}
    count: 2
    labels: {nvidia.com/gpu.product: NVIDIA-L4}
    capacity: {nvidia.com/gpu: 4}
"""


@pytest.fixture(autouse=True, scope="session")
def fast_password_hashing() -> None:
    """Personas are created for most tests; PBKDF2's deliberate slowness buys nothing here."""
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_process_state() -> None:
    """Each test starts as a fresh process would: nothing kept between requests."""
    from gpuqueue.core import caches

    caches.forget_everything()


@pytest.fixture
def cluster_file(tmp_path: Path, settings: Any) -> Path:
    """A small simulated cluster: 4 × 8 H100 and 2 × 4 L4; tests may rewrite it."""
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER_YAML)
    settings.GPUQUEUE_SIM_CLUSTER = str(path)
    return path


@pytest.fixture
def backend(cluster_file: Path) -> Any:
    from gpuqueue.cluster import get_backend
    from gpuqueue.cluster.simulated import SimulatedBackend

    get_backend.cache_clear()
    yield SimulatedBackend(cluster_file, startup_seconds=0, checkpoint_seconds=0)
    get_backend.cache_clear()


@pytest.fixture
def world(db: Any) -> Any:
    """Teams, flavors, quotas and the four personas."""
    from django.contrib.auth import get_user_model

    from gpuqueue.models import Flavor, Quota
    from teams.models import Membership, Role, Team

    User = get_user_model()

    class World:
        pass

    w = World()
    w.h100 = Flavor.objects.create(
        name="h100",
        resource_name="nvidia.com/gpu",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    )
    w.l4 = Flavor.objects.create(
        name="l4",
        resource_name="nvidia.com/gpu",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"},
    )
    w.team_a = Team.objects.create(slug="team-a", name="Team A", namespace="team-a")
    w.team_b = Team.objects.create(slug="team-b", name="Team B", namespace="team-b")
    for team in (w.team_a, w.team_b):
        Quota.objects.create(team=team, flavor=w.h100, guarantee=8, limit=32, weight=1)
        Quota.objects.create(team=team, flavor=w.l4, guarantee=2, limit=8, weight=1)
    w.alice = User.objects.create_user("alice", password="alice-pass-1")
    w.bob = User.objects.create_user("bob", password="bob-pass-1")
    w.carol = User.objects.create_user("carol", password="carol-pass-1")
    w.root = User.objects.create_superuser("root", "root@example.com", "root-pass-1")
    Membership.objects.create(user=w.alice, team=w.team_a, role=Role.MEMBER)
    Membership.objects.create(user=w.bob, team=w.team_a, role=Role.ADMIN)
    Membership.objects.create(user=w.carol, team=w.team_b, role=Role.MEMBER)
    return w


@pytest.fixture
def submit(world: Any) -> Any:
    """submit(user, team=..., workers=..., ...) -> Job, through the real submission service."""
    from gpuqueue.services.jobs.submit import submit_job

    def _submit(
        user: Any = None,
        *,
        team: Any = None,
        flavor: Any = None,
        key: str | None = None,
        **fields: Any,
    ) -> Any:
        fields.setdefault("name", "train")
        fields.setdefault("image", "ghcr.io/acme/train:1")
        return submit_job(
            user or world.alice,
            team or world.team_a,
            flavor or world.h100,
            fields,
            idempotency_key=key,
        ).job

    return _submit


H100_MODEL = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def shared_flavor(world: Any) -> Any:
    """h100-shared: 4 slices per GPU of 81,920 MiB (the device plugin's nvidia.com/gpu.shared),
    on one node of 2 GPUs (8 slices), with a quota for both teams; H100 nodes already listed
    report their model, others none."""
    from gpuqueue.models import Flavor, Node, Quota

    flavor = Flavor.objects.create(
        name="h100-shared",
        resource_name="nvidia.com/gpu.shared",
        node_selector={"nvidia.com/gpu.product": H100_MODEL},
        shareable=True,
        slices_per_gpu=4,
        gpu_memory_mib=81920,
    )
    Node.objects.create(
        name="h100-shared-0",
        capacity={"nvidia.com/gpu.shared": 8},
        labels={"nvidia.com/gpu.product": H100_MODEL},
    )
    Node.objects.filter(name__startswith="h100-").update(gpu_model=H100_MODEL)
    for team in (world.team_a, world.team_b):
        Quota.objects.create(team=team, flavor=flavor, guarantee=1, limit=2)
    return flavor


@pytest.fixture(autouse=True)
def events_the_state_machine_lists(request: pytest.FixtureRequest) -> Any:
    """After each test that used the database: every job event it wrote is one the state
    machine lists (gpuqueue/core/states.py: the entry, a transition, or an event of a listed
    kind within a state), whichever path wrote it (a service, the cycle's SQL, a view)."""
    names = set(request.fixturenames)
    marker = request.node.get_closest_marker("django_db")
    transactional = bool(
        {"transactional_db", "live_server", "django_db_reset_sequences"} & names
        or (marker is not None and marker.kwargs.get("transaction"))
    )
    if not transactional and "db" not in names and marker is None:
        yield
        return
    # Requested here, so that this check runs before the database is rolled back or flushed.
    request.getfixturevalue("transactional_db" if transactional else "db")
    yield
    from gpuqueue.core.states import EVENT_KIND, is_listed_event
    from gpuqueue.models import JobEvent

    unlisted = [
        (job_id, from_state, to_state, (details or {}).get(EVENT_KIND), reason)
        for job_id, from_state, to_state, details, reason in JobEvent.objects.values_list(
            "job_id", "from_state", "to_state", "details", "reason"
        )
        if not is_listed_event(from_state, to_state, (details or {}).get(EVENT_KIND))
    ]
    assert not unlisted, f"job events the state machine does not list: {unlisted[:5]}"
