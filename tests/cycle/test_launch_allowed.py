"""A job launches only with what its team allows when its pods are made: a name taken off the
team's list after the job was queued fails it at launch, saying which, and nothing is made."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.core.states import JobState
from gpuqueue.cycle.launch import launch_admitted
from gpuqueue.models import Job
from teams.models import Team

pytestmark = pytest.mark.django_db


def _admitted(job: Job) -> Job:
    Job.objects.filter(pk=job.pk).update(
        state=JobState.ADMITTED, placement={"h100-0": 1}, attempts=job.attempts + 1
    )
    job.refresh_from_db()
    return job


def _allow(team: Team, **lists: list[str]) -> None:
    Team.objects.filter(pk=team.pk).update(**{f"allowed_{k}": v for k, v in lists.items()})


def test_a_secret_taken_off_the_list_after_submission_fails_the_job_at_launch(
    world: Any, submit: Any, backend: Any
) -> None:
    _allow(world.team_a, secrets=["wandb", "leaked"])
    kept = _admitted(submit(env_from_secrets=["wandb"]))
    revoked = _admitted(submit(env_from_secrets=["wandb", "leaked"]))
    _allow(world.team_a, secrets=["wandb"])

    launch_admitted([kept.pk, revoked.pk], backend)

    revoked.refresh_from_db()
    assert revoked.state == JobState.FAILED
    assert revoked.message.startswith("no longer allowed by its team: Secret leaked of namespace")
    assert revoked.events.last().reason == revoked.message
    kept.refresh_from_db()
    assert kept.state == JobState.ADMITTED
    assert {status.job_id for status in backend.observe()} == {kept.pk}  # the one launched
