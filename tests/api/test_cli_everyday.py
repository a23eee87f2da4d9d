"""The `gpuqueue` command as people type it every day: durations with units, cancelling many
jobs at once, options after the subcommand, and what to do when it is not set up."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuqueue.client.cli import main
from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobArray

SUBMIT = ["submit", "--team", "team-a", "--flavor", "h100", "--image", "ghcr.io/acme/train:1"]


def test_runtimes_and_grace_take_durations(cli: Any) -> None:
    flags = ["--expected-runtime", "90m", "--max-runtime", "2h", "--checkpoint-grace", "45s"]
    assert cli(*SUBMIT, *flags) == 0
    job = Job.objects.get()
    assert (job.expected_runtime_seconds, job.max_runtime_seconds) == (5400, 7200)
    assert job.checkpoint_grace_seconds == 45


def test_a_bad_duration_is_refused_before_anything_is_sent(cli: Any, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exited:
        cli(*SUBMIT, "--max-runtime", "soon")
    assert exited.value.code == 2
    assert "'soon' is no duration; write seconds (5400) or" in capsys.readouterr().err
    assert not Job.objects.exists()


def test_cancel_takes_several_ids_and_ranges(cli: Any, submit: Any, capsys: Any) -> None:
    jobs = [submit(name=f"j{i}") for i in range(5)]
    a, b, c, d, e = (job.pk for job in jobs)
    assert cli("cancel", str(a), f"{b}-{d}") == 0
    states = dict(Job.objects.values_list("pk", "state"))
    assert [states[pk] for pk in (a, b, c, d, e)] == [JobState.CANCELLED] * 4 + [JobState.PENDING]
    out = capsys.readouterr().out
    assert f"job {a} CANCELLED" in out and f"job {d} CANCELLED" in out


def test_cancel_goes_on_past_ended_and_missing_jobs_and_says_why(
    cli: Any, submit: Any, capsys: Any
) -> None:
    ended, pending = submit(name="ended"), submit(name="pending")
    assert cli("cancel", str(ended.pk)) == 0
    capsys.readouterr()
    assert cli("cancel", str(ended.pk), str(pending.pk)) == 0  # as asked: both are ended now
    captured = capsys.readouterr()
    assert f"error: Job {ended.pk} is already cancelled." in captured.err
    assert f"job {pending.pk} CANCELLED" in captured.out
    assert cli("cancel", "999999") == 4
    assert "error: No job 999999 (or you may not see it)." in capsys.readouterr().err


def test_cancel_array_cancels_each_arrays_tasks(
    cli: Any, api: Any, job_body: dict[str, Any], capsys: Any
) -> None:
    made = [
        api("alice").post("/api/v1/arrays/", {**job_body, "array": "0-2"}, format="json").json()
        for _ in range(2)
    ]
    assert cli("cancel", "--array", ",".join(str(m["id"]) for m in made)) == 0
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.CANCELLED}
    assert JobArray.objects.count() == 2
    assert f"array {made[1]['id']} [0-2]: 3 tasks" in capsys.readouterr().out


def test_global_options_work_after_the_subcommand(
    live_server: Any, tokens: dict[str, str], submit: Any, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.delenv("GPUQUEUE_URL", raising=False)
    monkeypatch.delenv("GPUQUEUE_TOKEN", raising=False)
    job = submit(name="after")
    argv = ["status", str(job.pk), "--json", "--url", live_server.url, "--token", tokens["alice"]]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "after"
    # Before the subcommand still works, and one given there is kept.
    assert main(["--json", "--url", live_server.url, "status", str(job.pk), "--token",
                 tokens["alice"]]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["id"] == job.pk


@pytest.fixture
def unconfigured(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("GPUQUEUE_URL", raising=False)
    monkeypatch.delenv("GPUQUEUE_TOKEN", raising=False)
    monkeypatch.delenv("GPUQUEUE_CONFIG", raising=False)


def test_without_a_token_it_says_where_to_put_one_and_how_to_make_one(
    live_server: Any, unconfigured: None, capsys: Any, world: Any
) -> None:
    assert main(["--url", live_server.url, "whoami"]) == 4
    err = capsys.readouterr().err
    assert "No API token is configured." in err
    assert "set GPUQUEUE_URL and GPUQUEUE_TOKEN, or run `gpuqueue configure --url URL" in err
    assert f"{live_server.url}/tokens/" in err and "manage.py create_api_token" in err


def test_a_refused_token_says_so_and_how_to_make_another(
    live_server: Any, unconfigured: None, capsys: Any, world: Any
) -> None:
    assert main(["whoami", "--url", live_server.url, "--token", "gq_nope_nope"]) == 4
    err = capsys.readouterr().err
    assert "The API token was refused: it may be mistyped, expired or revoked." in err
    assert "gpuqueue configure" in err


def test_with_no_server_configured_it_says_how_to_configure_one(
    unconfigured: None, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr("gpuqueue.client.api.DEFAULT_URL", "http://127.0.0.1:9")  # nothing there
    assert main(["whoami"]) == 4
    err = capsys.readouterr().err
    assert "cannot reach http://127.0.0.1:9" in err
    assert "No server is configured: set GPUQUEUE_URL and GPUQUEUE_TOKEN" in err


def test_cancel_json_gives_the_job_for_one_id_and_a_list_for_several(
    cli: Any, submit: Any, capsys: Any
) -> None:
    one, two, three = (submit(name=f"j{i}") for i in range(3))
    assert cli("--json", "cancel", str(one.pk)) == 0
    assert json.loads(capsys.readouterr().out)["id"] == one.pk
    assert cli("cancel", f"{two.pk},{three.pk}", "--json") == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)] == [two.pk, three.pk]
