"""The `gpuqueue` command against a live server, through the public API only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuqueue.client.cli import main
from gpuqueue.core.states import JobState
from gpuqueue.models import Job


def test_configure_then_submit_from_yaml_and_flags_retry_safely(
    cli: Any, live_server: Any, tokens: dict[str, str], tmp_path: Path, capsys: Any
) -> None:
    assert main(["configure", "--url", live_server.url, "--token", tokens["alice"]]) == 0
    config = next((tmp_path / "config").rglob("config.json"))
    assert oct(config.stat().st_mode & 0o777) == "0o600"
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "team: team-a\nflavor: h100\nimage: ghcr.io/acme/train:1\nworkers: 2\n"
        "env: {EPOCHS: '3'}\nlabels: {app: train}\n"
    )
    args = [
        "submit",
        "-f",
        str(spec),
        "--gpus-per-worker",
        "4",
        "--idempotency-key",
        "n-1",
        "--env",
        "LR=0.1",
        "--",
        "python",
        "train.py",
    ]
    assert main(args) == 0  # URL and token from the config file
    assert main(args) == 0  # the pipeline's retry
    job = Job.objects.get()
    assert (job.workers, job.gpus_per_worker) == (2, 4)
    assert job.env == {"EPOCHS": "3", "LR": "0.1"} and job.command == ["python", "train.py"]
    assert f"job {job.pk} PENDING" in capsys.readouterr().out


def test_list_status_events_and_cancel(cli: Any, submit: Any, capsys: Any) -> None:
    job = submit(name="resnet")
    assert cli("list", "--state", "PENDING") == 0
    assert "resnet" in capsys.readouterr().out
    assert cli("status", str(job.pk)) == 0
    assert "Waiting for the next admission cycle." in capsys.readouterr().out
    assert cli("cancel", str(job.pk)) == 0
    assert cli("--json", "events", str(job.pk)) == 0
    out = capsys.readouterr().out
    events = json.loads(out[out.index("[") :])
    assert [e["to_state"] for e in events] == ["PENDING", "CANCELLED"]


@pytest.mark.parametrize(
    ("state", "exit_code", "want"),
    [
        (JobState.SUCCEEDED, 0, 0),
        (JobState.FAILED, 7, 7),
        (JobState.FAILED, None, 1),
        (JobState.CANCELLED, None, 3),
    ],
)
def test_wait_exits_with_the_jobs_result(
    cli: Any, submit: Any, state: str, exit_code: int | None, want: int
) -> None:
    from django.utils import timezone

    job = submit()
    Job.objects.filter(pk=job.pk).update(
        state=state, exit_code=exit_code, finished_at=timezone.now()
    )
    assert cli("wait", str(job.pk), "--interval", "0.05", "-q") == want


def test_wait_times_out_with_124(cli: Any, submit: Any) -> None:
    job = submit()
    assert cli("wait", str(job.pk), "--timeout", "0.2", "--interval", "0.05", "-q") == 124


def test_errors_print_the_fields_and_exit_4(cli: Any, capsys: Any) -> None:
    code = cli("submit", "--team", "team-a", "--flavor", "h100", "--image", "Bad Image")
    assert code == 4
    assert "image:" in capsys.readouterr().err


def test_the_console_script_runs_without_django(
    live_server: Any, tokens: dict[str, str], nodes: Any
) -> None:
    env = {**os.environ, "GPUQUEUE_URL": live_server.url, "GPUQUEUE_TOKEN": tokens["carol"]}
    code = (
        "import sys; from gpuqueue.client.cli import main; rc = main(['whoami']); "
        "assert 'django' not in sys.modules, 'the client imported Django'; sys.exit(rc)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("carol: team-b (member)")
