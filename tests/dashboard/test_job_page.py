"""The job page: every panel whole on first render, one way of writing a time, an exit code
explained (137: killed, often out of memory), and Resubmit/Clone into a filled-in form."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.jobs.transitions import transition
from tests.dashboard.conftest import run_on

pytestmark = pytest.mark.django_db


def _failed(job: Job, code: int) -> Job:
    run_on(job, "h100-0")
    now = timezone.now()
    transition(
        job,
        JobState.FAILED,
        reason=f"failed: exit code {code}",
        actor="cluster",
        finished_at=now,
        exit_code=code,
        message=f"exit code {code}",
    )
    return Job.objects.get(pk=job.pk)


def test_an_exit_code_137_is_said_once_with_what_it_usually_means(
    clients: Any, world: Any, nodes: Any, submit: Any
) -> None:
    job = _failed(submit(world.alice, name="oom"), 137)
    html = clients["alice"].get(f"/jobs/{job.pk}/").content.decode()
    assert "failed: failed" not in html
    assert "failed</span>: exit code 137" in html  # the attempt's ending, once
    hint = html.split('id="job-exit-hint">')[1].split("</p>")[0]
    assert "killed (SIGKILL)" in hint and "out of memory" in hint
    term = _failed(submit(world.alice, name="stopped"), 143)
    assert "terminated (SIGTERM)" in clients["alice"].get(f"/jobs/{term.pk}/").content.decode()
    ordinary = _failed(submit(world.alice, name="error"), 1)
    assert (
        'id="job-exit-hint"' not in clients["alice"].get(f"/jobs/{ordinary.pk}/").content.decode()
    )


def test_every_time_on_the_job_page_is_written_one_way(clients: Any, jobs: Any) -> None:
    html = clients["alice"].get(f"/jobs/{jobs.a_running.pk}/").content.decode()
    main = html.split("<main", 1)[1]
    times = re.findall(r'<time datetime="[^"]+" data-local="(\w+)">([^<]*)</time>', main)
    assert len(times) >= 3  # submitted, started, the timeline's events, the attempt
    assert {how for how, _ in times} == {"stamp"}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text) for _, text in times)


def test_clone_fills_the_form_from_the_job(
    clients: Any, world: Any, nodes: Any, submit: Any
) -> None:
    job = submit(
        world.alice,
        name="train-7b",
        workers=2,
        gpus_per_worker=4,
        command=["python", "train.py", "--lr", "3e-4 warm"],
        env={"SEED": "7"},
        expected_runtime_seconds=5400,
    )
    page = clients["alice"].get(f"/jobs/{job.pk}/").content.decode()
    assert f'href="/jobs/new/?from={job.pk}"' in page
    form = clients["alice"].get(f"/jobs/new/?from={job.pk}").content.decode()
    assert 'value="train-7b"' in form and 'id="cloned-from"' in form
    assert "python train.py --lr &#x27;3e-4 warm&#x27;" in form  # quoted as a shell needs
    assert "SEED=7" in form and 'value="5400"' in form
    assert 'name="workers" value="2"' in form or 'value="2"' in form
    # Submitting the copy as it is makes a second job of the same shape.
    before = Job.objects.count()
    fields = {
        "team": "team-a",
        "flavor": "h100",
        "name": "train-7b",
        "image": job.image,
        "command": "python train.py --lr '3e-4 warm'",
        "workers": "2",
        "gpus_per_worker": "4",
        "priority": "0",
        "preemptible": "on",
        "checkpoint_grace_seconds": "120",
        "env": "SEED=7",
        "expected_runtime_seconds": "1h30m",
    }
    assert clients["alice"].post("/jobs/new/", fields).status_code == 303
    copy = Job.objects.exclude(pk=job.pk).latest("id")
    assert Job.objects.count() == before + 1
    assert (copy.command, copy.env["SEED"], copy.workers) == (job.command, "7", 2)


def test_clone_of_a_job_the_viewer_cannot_see_is_404(clients: Any, jobs: Any) -> None:
    assert clients["carol"].get(f"/jobs/new/?from={jobs.a_running.pk}").status_code == 404
    assert clients["alice"].get("/jobs/new/?from=x").status_code == 404


def test_an_array_tasks_clone_leaves_out_the_arrays_own_variables(
    clients: Any, world: Any, nodes: Any
) -> None:
    from gpuqueue.services.jobs.array_spec import parse
    from gpuqueue.services.jobs.arrays import submit_array
    from gpuqueue.services.jobs.dependencies import Dependencies

    fields = {"name": "sweep", "image": "ghcr.io/acme/train:1", "env": {"LR": "0.1"}}
    array = submit_array(
        world.alice, world.team_a, world.h100, fields, parse("0-1"), Dependencies()
    ).array
    task = Job.objects.get(array=array, array_index=1)
    form = clients["alice"].get(f"/jobs/new/?from={task.pk}").content.decode()
    assert "LR=0.1" in form and "GPUQUEUE_ARRAY_ID=" not in form
