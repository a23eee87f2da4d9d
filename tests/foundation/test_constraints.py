"""Database constraints hold even when code forgets to validate."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, Quota
from teams.models import Membership, Role, Team


def refused(make: Any) -> bool:
    try:
        with transaction.atomic():
            make()
    except IntegrityError:
        return True
    return False


def test_quota_constraints(world: Any) -> None:
    team = Team.objects.create(slug="team-c", name="C", namespace="team-c")
    assert refused(lambda: Quota.objects.create(team=team, flavor=world.h100, guarantee=9, limit=8))
    assert refused(
        lambda: Quota.objects.create(team=team, flavor=world.h100, guarantee=1, limit=8, weight=-1)
    )
    Quota.objects.create(team=team, flavor=world.h100, guarantee=8, limit=8)
    assert refused(lambda: Quota.objects.create(team=team, flavor=world.h100, guarantee=0, limit=1))


def test_job_constraints(world: Any, submit: Any) -> None:
    base = {
        "team": world.team_a,
        "user": world.alice,
        "flavor": world.h100,
        "name": "x",
        "image": "i",
    }
    assert refused(lambda: Job.objects.create(**base, workers=0))
    assert refused(lambda: Job.objects.create(**base, gpus_per_worker=0))
    assert refused(lambda: Job.objects.create(**base, state="LOST"))
    from django.utils import timezone

    assert refused(
        lambda: Job.objects.create(**base, state=JobState.RUNNING, finished_at=timezone.now())
    )
    Job.objects.create(**base, idempotency_key="k1")
    assert refused(lambda: Job.objects.create(**base, idempotency_key="k1"))
    # The same key from another user is another job; no key at all never collides.
    Job.objects.create(**{**base, "user": world.bob}, idempotency_key="k1")
    Job.objects.create(**base)
    Job.objects.create(**base)


def test_membership_and_team_constraints(world: Any) -> None:
    assert refused(
        lambda: Membership.objects.create(user=world.alice, team=world.team_a, role=Role.ADMIN)
    )
    assert refused(
        lambda: Membership.objects.create(user=world.carol, team=world.team_a, role="owner")
    )
    assert refused(lambda: Team.objects.create(slug="team-a", name="dup", namespace="other"))
    assert refused(lambda: Team.objects.create(slug="other", name="dup", namespace="team-a"))


def test_submitting_twice_with_one_idempotency_key_gives_one_job(world: Any, submit: Any) -> None:
    first = submit(key="nightly-2026-11-22")
    second = submit(key="nightly-2026-11-22")
    assert first.pk == second.pk
    assert Job.objects.filter(user=world.alice).count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_create_exactly_one_job(world: Any) -> None:
    import threading

    from django.db import connection

    from gpuqueue.services.jobs.submit import submit_job

    barrier = threading.Barrier(6)
    ids: list[int] = []

    def retry() -> None:
        try:
            barrier.wait()
            job = submit_job(
                world.alice, world.team_a, world.h100, {"name": "n", "image": "i"}, "same-key"
            ).job
            ids.append(job.pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=retry) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 6 and len(set(ids)) == 1
    assert Job.objects.count() == 1
