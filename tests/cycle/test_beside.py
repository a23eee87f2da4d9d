"""The cycle's explain runs beside its launch (cycle/beside.py): on a connection of its own,
at the same time, and what it raises reaches the caller; inside a caller's transaction, whose
rows another connection cannot see, it runs at once instead. A launch that raises is not left
with the explain still running behind it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction

from gpuqueue.cycle import run
from gpuqueue.cycle.beside import beside
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.models import Job


@pytest.mark.django_db(transaction=True)
def test_the_work_runs_at_the_same_time_on_a_connection_of_its_own(world: Any, submit: Any) -> None:
    job = submit()  # committed: the other connection sees it
    started, go = threading.Event(), threading.Event()
    seen: list[Any] = []

    def work() -> None:
        started.set()
        assert go.wait(10), "the caller never went on: the work did not run beside it"
        seen.append((Job.objects.get(pk=job.pk).name, id(connection.connection)))

    wait = beside(work)
    assert started.wait(10)  # the work started, and the caller goes on meanwhile
    go.set()
    wait()
    Job.objects.count()  # this thread's own connection, opened if it was not
    assert seen[0][0] == "train" and seen[0][1] != id(connection.connection)


@pytest.mark.django_db(transaction=True)
def test_what_the_work_raises_is_raised_by_the_wait(world: Any) -> None:
    def work() -> None:
        raise RuntimeError("explain failed")

    wait = beside(work)
    with pytest.raises(RuntimeError, match="explain failed"):
        wait()


@pytest.mark.django_db(transaction=True)
def test_inside_the_caller_s_transaction_the_work_runs_at_once(world: Any, submit: Any) -> None:
    ran: list[str] = []
    with transaction.atomic():
        job = submit()  # not committed: only this connection sees it
        beside(lambda: ran.append(Job.objects.get(pk=job.pk).name))
        assert ran == ["train"]


@pytest.mark.django_db(transaction=True)
def test_a_launch_that_raises_leaves_the_explain_done_and_raises_its_own_error(
    world: Any, submit: Any, backend: Any, monkeypatch: Any
) -> None:
    sync_cluster(backend)
    submit(workers=4, gpus_per_worker=8)  # all 32 H100s
    waits = submit(gpus_per_worker=8)

    def down(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("backend down")

    explain = run._persist_pending

    def slow(*args: Any) -> None:
        time.sleep(0.5)  # still explaining when the launch fails
        explain(*args)

    monkeypatch.setattr(run, "launch_admitted", down)
    monkeypatch.setattr(run, "_persist_pending", slow)
    with pytest.raises(RuntimeError, match="backend down"):
        run.run_cycle(backend=backend)
    waits.refresh_from_db()
    assert waits.pending_reason is not None and waits.queue_position == 1
