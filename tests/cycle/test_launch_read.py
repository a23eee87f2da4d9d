"""A launch reads of each admitted job only the columns it uses (`admitted_jobs`), and the
spec it builds from them is the one the job's model gives: nothing the backend needs is
left out of the read."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.core.states import JobState
from gpuqueue.cycle.launch import admitted_jobs, launch_spec
from gpuqueue.models import Job
from teams.models import Team

pytestmark = pytest.mark.django_db


def _admit(job: Job, **changes: Any) -> None:
    Job.objects.filter(pk=job.pk).update(state=JobState.ADMITTED, **{"attempts": 1, **changes})


def test_the_spec_from_the_columns_read_is_the_spec_from_the_model(world: Any, submit: Any) -> None:
    Team.objects.filter(pk=world.team_a.pk).update(
        allowed_service_accounts=["trainer"],
        allowed_secrets=["ghcr-pull", "wandb"],
        allowed_claims=["imagenet"],
    )
    job = submit(
        workers=2,
        gpus_per_worker=4,
        command=["python", "train.py"],
        env={"EPOCHS": "3"},
        labels={"project": "llm"},
        annotations={"note": "x"},
        cpu_millicores=8000,
        cpu_limit_millicores=9000,
        memory_mib=32768,
        memory_limit_mib=40000,
        shm_mib=4096,
        max_runtime_seconds=7200,
        expected_runtime_seconds=3600,
        volumes=[{"claim": "imagenet", "mount_path": "/data", "read_only": True}],
        image_pull_secrets=["ghcr-pull"],
        env_from_secrets=["wandb"],
        service_account="trainer",
    )
    # A second attempt: the launch tells it where its checkpoint is.
    _admit(job, placement={"h100-0": 1, "h100-1": 1}, attempts=2, checkpoint_location="s3://c/7")

    [read] = admitted_jobs([job.pk])

    model = Job.objects.select_related("team", "flavor").get(pk=job.pk)
    assert launch_spec(read) == launch_spec(model)
    assert launch_spec(read).env["GPUQUEUE_CHECKPOINT"] == "s3://c/7"


def test_only_jobs_still_admitted_are_read(world: Any, submit: Any) -> None:
    admitted, cancelled, pending = submit(), submit(), submit()
    _admit(admitted, placement={"h100-0": 1})
    Job.objects.filter(pk=cancelled.pk).update(state=JobState.CANCELLED)

    assert [j.id for j in admitted_jobs([admitted.pk, cancelled.pk, pending.pk])] == [admitted.pk]
