"""The submission's one statement (gpuqueue/services/jobs/submission_sql.py) writes and reads as the
ORM would."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobEvent
from gpuqueue.services.jobs.submit import (
    SubmissionRefused,
    TeamRequired,
    flavor_for_submission,
    submit_job,
    teams_for_submission,
)

EVERY_FIELD = {
    "name": "train-7b",
    "image": "ghcr.io/acme/train@sha256:" + "a" * 64,
    "command": ["torchrun", "--nproc", "8", "train.py", ""],
    "env": {"LR": "3e-4", "UNICODE": "µ→✓", "QUOTE": 'it\'s "quoted" 100%'},
    "labels": {"acme.io/project": "llm"},
    "annotations": {"note": "multi\nline"},
    "workers": 3,
    "gpus_per_worker": 8,
    "priority": -7,
    "preemptible": False,
    "checkpoint_grace_seconds": 0,
    "max_runtime_seconds": None,
    "expected_runtime_seconds": 3600,
}


def test_a_submitted_job_reads_back_through_the_orm_field_for_field(world: Any) -> None:
    submitted = submit_job(world.alice, world.team_a, world.h100, dict(EVERY_FIELD), "key-1").job
    stored = Job.objects.get(pk=submitted.pk)
    for field, value in EVERY_FIELD.items():
        assert getattr(stored, field) == value, field
        assert getattr(submitted, field) == value, field
    assert (stored.team_id, stored.user_id, stored.flavor_id) == (
        world.team_a.pk,
        world.alice.pk,
        world.h100.pk,
    )
    assert stored.state == JobState.PENDING and stored.idempotency_key == "key-1"
    assert stored.submitted_at == submitted.submitted_at
    assert stored.placement == {} and stored.pending_reason is None and stored.attempts == 0
    (event,) = JobEvent.objects.filter(job=stored)
    assert (event.from_state, event.to_state, event.reason, event.actor) == (
        "",
        JobState.PENDING,
        "submitted",
        "user:alice",
    )
    assert event.details == {}


def test_a_non_member_is_refused_and_nothing_is_written(world: Any) -> None:
    with pytest.raises(SubmissionRefused) as refused:
        submit_job(world.carol, world.team_a, world.h100, {"name": "n", "image": "i"})
    assert refused.value.status == 403
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_a_site_admin_submits_to_any_team(world: Any) -> None:
    job = submit_job(world.root, world.team_b, world.h100, {"name": "n", "image": "i"}).job
    assert Job.objects.get(pk=job.pk).team_id == world.team_b.pk


def test_without_a_team_the_job_reads_back_as_with_it(world: Any) -> None:
    """The statement that finds the only team writes the same row and event."""
    implicit = submit_job(world.alice, None, world.h100, dict(EVERY_FIELD), "key-i").job
    named = submit_job(world.alice, world.team_a, world.h100, dict(EVERY_FIELD), "key-n").job
    assert implicit.team == world.team_a and implicit.team.slug == "team-a"
    assert vars(implicit.team) | {"_state": None} == vars(named.team) | {"_state": None}
    columns = [f.attname for f in Job._meta.concrete_fields if f.attname not in ("id",)]
    one, other = Job.objects.values(*columns).filter(pk__in=[implicit.pk, named.pk]).order_by("id")
    different = {k for k in columns if one[k] != other[k]}
    assert different == {"idempotency_key", "submitted_at"}, different
    events = JobEvent.objects.filter(job__in=[implicit.pk, named.pk]).order_by("id")
    assert [(e.to_state, e.reason, e.actor) for e in events] == [
        (JobState.PENDING, "submitted", "user:alice")
    ] * 2


def test_without_a_team_one_of_several_or_none_is_refused(world: Any) -> None:
    from teams.models import Membership, Role

    Membership.objects.create(user=world.carol, team=world.team_a, role=Role.MEMBER)
    for user in (world.carol, world.root):  # two teams; a site admin, two teams in all
        with pytest.raises(TeamRequired) as refused:
            submit_job(user, None, world.h100, {"name": "n", "image": "i"})
        assert (refused.value.field, refused.value.status) == ("team", 400)
    Membership.objects.filter(user=world.carol).delete()
    with pytest.raises(TeamRequired):
        submit_job(world.carol, None, world.h100, {"name": "n", "image": "i"})
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_without_a_team_a_change_of_teams_between_the_statements_takes_the_team_of_now(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The insert saw two teams; by the lookup that explains it, one was left."""
    from gpuqueue.services.jobs import submit
    from teams.models import Membership, Role

    Membership.objects.create(user=world.carol, team=world.team_a, role=Role.MEMBER)
    real = submit.teams_for_submission

    def left_team_a_meanwhile(user: Any, *args: Any, **kwargs: Any) -> Any:
        Membership.objects.filter(user=world.carol, team=world.team_a).delete()
        return real(user, *args, **kwargs)

    monkeypatch.setattr(submit, "teams_for_submission", left_team_a_meanwhile)
    result = submit_job(world.carol, None, world.h100, {"name": "n", "image": "i"}, "k")
    assert result.created and result.job.team == world.team_b
    assert Job.objects.get().team_id == world.team_b.pk and JobEvent.objects.count() == 1


def test_without_a_team_inside_a_callers_transaction(world: Any) -> None:
    with transaction.atomic():
        first = submit_job(world.alice, None, world.h100, {"name": "a", "image": "i"}, "k")
        again = submit_job(world.alice, None, world.h100, {"name": "b", "image": "i"}, "k")
        assert again.job.pk == first.job.pk and not again.created
        with pytest.raises(TeamRequired):
            submit_job(world.root, None, world.h100, {"name": "c", "image": "i"})
        assert Job.objects.count() == 1  # the transaction still answers queries
    assert JobEvent.objects.count() == 1


def test_a_duplicate_key_inside_a_callers_transaction_leaves_it_usable(world: Any) -> None:
    with transaction.atomic():
        first = submit_job(world.alice, world.team_a, world.h100, {"name": "a", "image": "i"}, "k")
        again = submit_job(world.alice, world.team_a, world.h100, {"name": "b", "image": "i"}, "k")
        assert again.job.pk == first.job.pk and not again.created
        assert Job.objects.count() == 1  # the transaction still answers queries
    assert JobEvent.objects.count() == 1


def test_teams_for_submission_are_the_users_teams_or_any_for_a_site_admin(world: Any) -> None:
    assert [t.slug for t in teams_for_submission(world.alice)] == ["team-a"]
    assert [t.slug for t in teams_for_submission(world.alice, "team-a")] == ["team-a"]
    assert teams_for_submission(world.alice, "team-b") == []
    assert teams_for_submission(world.alice, "no-such-team") == []
    assert [t.slug for t in teams_for_submission(world.root)] == ["team-a", "team-b"]
    team = teams_for_submission(world.root, "team-b")[0]
    assert (team.pk, team.name, team.namespace) == (world.team_b.pk, "Team B", "team-b")


def test_flavor_for_submission_reads_the_whole_row(world: Any) -> None:
    flavor = flavor_for_submission("h100")
    assert flavor is not None and flavor.pk == world.h100.pk
    assert flavor.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert flavor_for_submission("H100") is None


def test_the_statement_was_checked_against_the_pinned_django() -> None:
    """gpuqueue/services/jobs/submission_sql.py builds the submission's statement from the models'
    `_meta` and converts values through the fields' own methods; a new Django may change
    them. This fails when the installed Django is not the version pinned in pyproject.toml:
    run the tests above against the new version, then move the pin."""
    import tomllib
    from pathlib import Path

    import django

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    pins = [d for d in pyproject["project"]["dependencies"] if d.lower().startswith("django==")]
    assert pins == [f"Django=={django.__version__}"]
