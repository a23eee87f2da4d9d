"""`gpuqueue queue`: the squeue of gpuqueue, and times a person reads."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from gpuqueue.client import humane
from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from tests.standings import show


def test_queue_shows_active_jobs_running_first_then_by_position(
    cli: Any, submit: Any, capsys: Any
) -> None:
    running = submit(name="running-one")
    later = submit(name="second-in-line")
    first = submit(name="first-in-line", workers=2, gpus_per_worker=4)
    done = submit(name="finished-one")
    now = timezone.now()
    Job.objects.filter(pk=running.pk).update(
        state=JobState.RUNNING,
        admitted_at=now - timedelta(minutes=30),
        started_at=now - timedelta(minutes=25),
    )
    Job.objects.filter(pk=first.pk).update(estimated_start=now + timedelta(minutes=40))
    show(
        first.pk,
        queue_position=1,
        cluster_position=1,
        reason={
            "code": "no_capacity",
            "numbers": {
                "flavor": "h100",
                "workers": 2,
                "gpus_per_worker": 4,
                "workers_fit": 1,
                "free": 4,
            },
        },
    )
    show(later.pk, queue_position=2, cluster_position=2)
    Job.objects.filter(pk=done.pk).update(state=JobState.SUCCEEDED, finished_at=now)
    assert cli("queue") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == list(humane.QUEUE_COLUMNS)
    at = lines[0].index("NAME")  # columns are padded to the header's offsets
    names = [line[at:].split()[0] for line in lines[1:]]
    assert names == ["running-one", "first-in-line", "second-in-line"]  # no finished job
    assert "25 min" in lines[1]  # running for
    # The reason's word fits the line; `gpuqueue status` gives its sentence.
    assert "1/1" in lines[2] and "2×4 h100" in lines[2] and lines[2].endswith("Resources")
    assert cli("--json", "queue", "--state", "RUNNING") == 0
    assert [j["name"] for j in json.loads(capsys.readouterr().out)] == ["running-one"]


def test_status_gives_the_estimated_start_in_local_time_and_quotes_the_command(
    cli: Any, submit: Any, capsys: Any
) -> None:
    job = submit(name="quoted", command=["python", "-c", "print('two words')"])
    Job.objects.filter(pk=job.pk).update(estimated_start=timezone.now() + timedelta(hours=2))
    assert cli("status", str(job.pk)) == 0
    out = capsys.readouterr().out
    assert "command: python -c 'print('\"'\"'two words'\"'\"')'" in out
    assert "(in 2 h" in out or "(in 1 h 59 min)" in out
    # Not an ISO string: the viewer's local time and how far off it is.
    assert re.search(r"estimated start: \d{4}-\d\d-\d\d \d\d:\d\d \w+ \(in ", out)


def test_when_is_local_and_relative() -> None:
    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    assert humane.when("2026-11-24T12:12:00Z", now).endswith("(in 12 min)")
    assert humane.when("2026-11-24T09:55:00+00:00", now).endswith("(2 h 05 min ago)")
    assert humane.when(None, now) == ""


def test_a_job_of_pod_sets_shows_each_pod_set_s_pods_and_gpus() -> None:
    """A PyTorchJob with a 1-GPU Master beside 3 Workers of 8 reads as its pod sets, not as
    the 25 one-GPU units its GPUs are counted in."""
    job = {"workers": 25, "gpus_per_worker": 1, "flavor": "h100", "gpu_milli": 0}
    assert humane.shape(job) == "25×1 h100"
    sets = [{"name": "Master", "pods": 1, "gpus": 1}, {"name": "Worker", "pods": 3, "gpus": 8}]
    assert humane.shape({**job, "pod_sets": sets}) == "1×1+3×8 h100"


def test_a_pending_job_not_yet_placed_in_line_comes_after_those_that_are(
    cli: Any, submit: Any, capsys: Any
) -> None:
    submit(name="just-submitted")
    placed = submit(name="placed-first")
    show(placed.pk, queue_position=1, cluster_position=1)
    assert cli("queue") == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines[0].index("NAME")
    assert [line[at:].split()[0] for line in lines[1:]] == ["placed-first", "just-submitted"]


def test_queue_shows_an_array_as_one_line_as_squeue_does(
    cli: Any, api: Any, job_body: Any, capsys: Any
) -> None:
    from gpuqueue.services.jobs.arrays import hold_over_limit

    body = {**job_body, "name": "sweep", "array": "0-9%2", "expected_runtime_seconds": "10m"}
    array = api("alice").post("/api/v1/arrays/", body, format="json").json()
    now = timezone.now()
    Job.objects.filter(array_id=array["id"], array_index__lt=2).update(
        state=JobState.RUNNING, admitted_at=now, started_at=now
    )
    hold_over_limit()
    assert cli("queue") == 0
    lines = capsys.readouterr().out.splitlines()
    mine = [line for line in lines[1:] if "sweep" in line]
    assert len(mine) == 1, lines
    assert mine[0].startswith(f"{array['id']}_[2-9%2]")
    assert "2 running, 8 pending; 2 at a time; done ~" in mine[0]
    assert cli("queue", "--tasks") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len([line for line in lines[1:] if "sweep" in line]) == 10
    assert cli("list") == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if "sweep" in line]
    assert len(listed) == 1 and f"{array['id']}_[2-9%2]" in listed[0] and "RUNNING" in listed[0]
