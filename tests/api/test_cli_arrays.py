"""`gpuqueue submit --array` and `--after-ok`, `gpuqueue status --array`, against a live
server."""

from __future__ import annotations

from typing import Any

from gpuqueue.models import Job, JobArray, JobHold


def test_submit_an_array_with_a_cap_then_read_it(cli: Any, capsys: Any) -> None:
    args = ["submit", "--team", "team-a", "--flavor", "h100", "--image", "ghcr.io/acme/t:1"]
    args += ["--array", "0-9%2", "--idempotency-key", "s-1", "--", "python", "t.py"]
    assert cli(*args) == 0
    assert cli(*args) == 0  # a retry
    array = JobArray.objects.get()
    assert (array.size, array.max_concurrent, array.tasks.count()) == (10, 2, 10)
    out = capsys.readouterr().out
    assert f"array {array.pk} [0-9%2]: 10 tasks of t, at most 2 at once" in out
    assert cli("status", "--array", str(array.pk)) == 0
    assert "10 pending" in capsys.readouterr().out


def test_submit_after_ok_holds_the_job_and_a_bad_id_list_is_a_usage_error(
    cli: Any, submit: Any, capsys: Any
) -> None:
    first, second = submit(), submit()
    args = ["submit", "--team", "team-a", "--flavor", "h100", "--image", "ghcr.io/acme/t:1"]
    assert cli(*args, "--after-ok", f"{first.pk},{second.pk}") == 0
    job = Job.objects.latest("id")
    assert job.hold == JobHold.DEPENDENCIES
    assert sorted(job.dependencies.values_list("upstream_id", flat=True)) == [first.pk, second.pk]
    assert cli(*args, "--after-ok", "twelve") == 2
    assert "--after-ok 'twelve'" in capsys.readouterr().err


def test_status_names_the_jobs_waited_for_the_waiting_ones_and_the_array(
    cli: Any, submit: Any, capsys: Any
) -> None:
    prep = submit(name="prep")
    args = ["submit", "--team", "team-a", "--flavor", "h100", "--image", "ghcr.io/acme/t:1"]
    assert cli(*args, "--name", "train", "--after-ok", str(prep.pk), "--keep-if-unmet") == 0
    train = Job.objects.get(name="train")
    capsys.readouterr()
    assert cli("status", str(train.pk)) == 0
    out = capsys.readouterr().out
    assert f"  waits for: job {prep.pk} prep (after_ok, PENDING)" in out
    assert "  kept pending if a dependency can no longer be met" in out
    assert f"Waiting for job #{prep.pk} to succeed (pending now)." in out
    assert cli("status", str(prep.pk)) == 0
    assert f"  waited for by: job {train.pk} train (after_ok, PENDING)" in capsys.readouterr().out
    assert cli(*args, "--array", "0-3") == 0
    task = Job.objects.get(array__isnull=False, array_index=2)
    capsys.readouterr()
    assert cli("status", str(task.pk)) == 0
    out = capsys.readouterr().out
    assert f"  array: task 2 of array {task.array_id}" in out and "waits for" not in out
