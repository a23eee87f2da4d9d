"""`gpuqueue logs` against a live server on the simulated cluster."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from django.utils import timezone

from gpuqueue.cluster.simulated import DURATION_ANNOTATION
from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from tests.api.test_logs import start_job


def test_logs_prints_the_last_lines_of_the_worker(
    cli: Any,
    submit: Any,
    cluster_file: Path,
    backend: Any,
    capsys: Any,
) -> None:
    job = start_job(submit(workers=2, annotations={DURATION_ANNOTATION: "20"}), cluster_file)
    assert cli("logs", str(job.pk), "--worker", "1", "--tail", "2") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("step 20 loss ") and lines[1] == "worker 1 exited with code 0"


def test_logs_of_a_job_that_never_started_exits_4_saying_so(
    cli: Any,
    submit: Any,
    backend: Any,
    capsys: Any,
) -> None:
    job = submit()
    assert cli("logs", str(job.pk)) == 4
    assert f"job {job.pk} has not started (404 not_started)" in capsys.readouterr().err


def test_a_bad_tail_is_refused_at_the_field(
    cli: Any,
    submit: Any,
    cluster_file: Path,
    backend: Any,
    capsys: Any,
) -> None:
    job = start_job(submit(), cluster_file)
    assert cli("logs", str(job.pk), "--tail", "0") == 4
    assert "tail:" in capsys.readouterr().err


def test_follow_prints_each_line_once_until_the_job_is_finished(
    cli: Any,
    submit: Any,
    cluster_file: Path,
    backend: Any,
    capsys: Any,
) -> None:
    """A worker that writes a step a second, followed with polls every 0.3 s for about 3 s:
    the lines come out in order with none twice and none missing; the exit is the job's."""
    job = start_job(submit(annotations={DURATION_ANNOTATION: "600"}), cluster_file, ran_for=2)

    def finish() -> None:
        Job.objects.filter(pk=job.pk).update(
            state=JobState.SUCCEEDED, exit_code=0, finished_at=timezone.now()
        )

    timer = threading.Timer(3.0, finish)
    timer.start()
    try:
        assert cli("logs", str(job.pk), "--follow", "--interval", "0.3") == 0
    finally:
        timer.cancel()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"worker 0 of 1: attempt 1 of job {job.pk} started"
    steps = [int(line.split()[1]) for line in lines[1:]]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 4, lines
