"""The admission cycle and the cluster sync on the simulated cluster, against real PostgreSQL."""

from __future__ import annotations

import contextlib
import os
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, JobEvent, Node, SimulatedWorkload
from gpuqueue.services.jobs.cancel import CancelRefused, cancel_job

SIM_DURATION = "gpuqueue.dev/sim-duration-seconds"


def states(job: Job) -> list[str]:
    return list(
        JobEvent.objects.filter(job=job).order_by("at", "id").values_list("to_state", flat=True)
    )


def test_a_two_worker_job_goes_from_pending_to_succeeded_with_an_event_per_step(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)  # the inventory first: nodes come from the cluster
    job = submit(workers=2, gpus_per_worker=8, annotations={SIM_DURATION: "30"})

    result = run_cycle(backend=backend)
    job.refresh_from_db()
    assert result.admitted == [job.pk]
    assert job.state == JobState.ADMITTED and job.attempts == 1
    assert sum(job.placement.values()) == 2 and all(n.startswith("h100-") for n in job.placement)

    sync_cluster(backend)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.started_at is not None

    sync_cluster(backend, now=timezone.now() + timedelta(seconds=31))
    SimulatedWorkload.objects.filter(job_id=job.pk).update(ends_at=timezone.now())
    sync_cluster(backend)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.exit_code == 0 and job.finished_at
    assert states(job) == ["PENDING", "ADMITTED", "RUNNING", "SUCCEEDED"]


def test_a_failing_workload_fails_the_job_with_its_exit_code(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)
    job = submit(annotations={SIM_DURATION: "0", "gpuqueue.dev/sim-exit-code": "3"})
    run_cycle(backend=backend)
    sync_cluster(backend)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.exit_code == 3
    assert "exit code 3" in job.message


def test_a_gang_that_does_not_fit_whole_creates_nothing(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)
    blocker = submit(workers=3, gpus_per_worker=8, annotations={SIM_DURATION: "600"})
    gang = submit(user=world.carol, team=world.team_b, workers=2, gpus_per_worker=8)
    result = run_cycle(backend=backend)
    assert result.admitted == [blocker.pk]
    gang.refresh_from_db()
    assert gang.state == JobState.PENDING and gang.placement == {}
    assert gang.pending_reason is not None and gang.queue_position == 1
    assert not SimulatedWorkload.objects.filter(job_id=gang.pk).exists()


def test_no_node_of_the_flavor_is_used_when_the_inventory_says_it_is_down(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)
    Node.objects.filter(name__startswith="h100-").update(ready=False)
    job = submit()
    assert run_cycle(backend=backend).admitted == []
    job.refresh_from_db()
    assert job.state == JobState.PENDING


def test_cancel_stops_a_running_job_on_the_cluster(
    world: Any, submit: Any, backend: Any, settings: Any
) -> None:
    sync_cluster(backend)
    job = submit(annotations={SIM_DURATION: "600"})
    run_cycle(backend=backend)
    sync_cluster(backend)
    with pytest.raises(CancelRefused):  # carol is in another team
        cancel_job(world.carol, job)
    cancel_job(world.alice, job)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.finished_at
    assert states(job)[-1] == "CANCELLED"
    # The after-commit stop used the configured backend; the sweep removes anything left.
    sync_cluster(backend)
    assert not SimulatedWorkload.objects.filter(job_id=job.pk).exists()


def test_an_admitted_job_lost_before_launch_is_launched_by_the_next_sync(
    world: Any, submit: Any, backend: Any
) -> None:
    """A crash between the admission commit and the launch call loses nothing."""
    sync_cluster(backend)
    job = submit()

    class CrashingBackend(type(backend)):  # type: ignore[misc]
        def launch_all(self, specs: Any) -> Any:
            raise SystemExit("worker killed")

    crashing = CrashingBackend(backend.cluster_file, startup_seconds=0, checkpoint_seconds=0)
    with pytest.raises(SystemExit):
        run_cycle(backend=crashing)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    assert not SimulatedWorkload.objects.filter(job_id=job.pk).exists()

    result = sync_cluster(backend)
    assert result.relaunched == [job.pk]
    sync_cluster(backend)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempts == 1


@pytest.mark.django_db(transaction=True)
def test_a_sync_during_a_cycle_s_launch_does_not_launch_its_jobs_a_second_time(
    world: Any, submit: Any, backend: Any
) -> None:
    """The watcher's pass runs while the worker is still launching what its cycle admitted:
    it must leave those jobs to it (twice the requests otherwise), and launch them itself
    only once no launch is under way (the launching process died)."""
    sync_cluster(backend)
    job = submit()
    entered, go_on = threading.Event(), threading.Event()
    calls: list[str] = []

    class SlowBackend(type(backend)):  # type: ignore[misc]
        def launch_all(self, specs: Any) -> Any:
            calls.append("cycle")
            entered.set()
            go_on.wait(10)
            raise SystemExit("the worker died while launching")

    slow = SlowBackend(backend.cluster_file, startup_seconds=0, checkpoint_seconds=0)

    def cycle() -> None:
        try:
            with contextlib.suppress(SystemExit):
                run_cycle(backend=slow)
        finally:
            connection.close()  # the session, and its locks, end with the process

    thread = threading.Thread(target=cycle)
    thread.start()
    assert entered.wait(10)
    result = sync_cluster(backend)
    assert result.relaunched == [] and calls == ["cycle"]
    assert not SimulatedWorkload.objects.filter(job_id=job.pk).exists()
    go_on.set()
    thread.join(10)

    assert sync_cluster(backend).relaunched == [job.pk]
    sync_cluster(backend)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempts == 1


def test_a_job_whose_launch_raises_fails_alone_with_the_error_and_the_others_start(
    world: Any, submit: Any, backend: Any
) -> None:
    """A duration past what a date can hold makes the simulated launch raise OverflowError:
    that job fails with the error, the cycle and the other job go on."""
    sync_cluster(backend)
    bad = submit(annotations={SIM_DURATION: "1000000000000"})
    good = submit(annotations={SIM_DURATION: "30"})

    result = run_cycle(backend=backend)
    assert sorted(result.admitted) == sorted([bad.pk, good.pk])
    bad.refresh_from_db()
    assert bad.state == JobState.FAILED and "OverflowError" in bad.message
    sync_cluster(backend)
    good.refresh_from_db()
    assert good.state == JobState.RUNNING


def test_a_crash_inside_the_cycle_transaction_leaves_the_queue_untouched(
    world: Any, submit: Any, backend: Any, monkeypatch: Any
) -> None:
    sync_cluster(backend)
    job = submit()

    def boom(*args: Any, **kwargs: Any) -> None:
        raise SystemExit("worker killed mid-cycle")

    monkeypatch.setattr("gpuqueue.cycle.run.store_fair_shares", boom)
    with pytest.raises(SystemExit):
        run_cycle(backend=backend)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.attempts == 0
    assert states(job) == ["PENDING"]
    monkeypatch.undo()
    assert run_cycle(backend=backend).admitted == [job.pk]


@pytest.mark.django_db(transaction=True)
def test_a_crash_while_explaining_keeps_the_admissions_and_the_next_cycle_explains(
    world: Any, submit: Any, backend: Any, monkeypatch: Any
) -> None:
    """Reasons and positions are written after the admissions commit (`_explain`): a crash
    there loses no admission, and the next cycle writes the reasons it did not."""
    sync_cluster(backend)
    fits = submit(workers=4, gpus_per_worker=8)  # all 32 H100s
    waits = submit(gpus_per_worker=8)

    def boom(*args: Any, **kwargs: Any) -> None:
        raise SystemExit("worker killed while explaining")

    monkeypatch.setattr("gpuqueue.cycle.run._persist_pending", boom)
    with pytest.raises(SystemExit):
        run_cycle(backend=backend)
    fits.refresh_from_db()
    waits.refresh_from_db()
    assert fits.state == JobState.ADMITTED and waits.pending_reason is None
    monkeypatch.undo()
    result = run_cycle(backend=backend)
    waits.refresh_from_db()
    assert not result.kept_plan and waits.pending_reason is not None
    assert waits.queue_position == 1


def test_a_dead_node_breaks_the_gang_and_requeues_it(
    world: Any, submit: Any, backend: Any, cluster_file: Any
) -> None:
    sync_cluster(backend)
    job = submit(workers=2, gpus_per_worker=8, annotations={SIM_DURATION: "600"})
    run_cycle(backend=backend)
    sync_cluster(backend)
    job.refresh_from_db()
    dead = sorted(job.placement)[0]
    # Take the node down: the simulated cluster re-reads its file when it changes.
    cluster_file.write_text(
        cluster_file.read_text()
        + f"  - name: {dead}\n    ready: false\n    capacity: {{nvidia.com/gpu: 8}}\n"
    )
    os.utime(cluster_file, (1, 1))  # a new mtime even within the same second
    sync_cluster(backend)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.placement == {}
    assert "gang broken" in job.message
    assert states(job) == ["PENDING", "ADMITTED", "RUNNING", "PENDING"]
    # The dead node's GPUs are never counted as free: the requeued gang avoids it.
    run_cycle(backend=backend)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and dead not in job.placement


def test_a_cycle_that_finds_another_running_does_nothing(
    world: Any, submit: Any, backend: Any
) -> None:
    from gpuqueue.core.locks import try_xact_lock

    sync_cluster(backend)
    job = submit()
    with transaction.atomic():
        assert try_xact_lock("admission_cycle")
        # This test's connection holds the lock; a cycle on another connection must skip.
        result: list[Any] = []

        def other() -> None:
            try:
                result.append(run_cycle(backend=backend))
            finally:
                connection.close()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert result[0].ran is False
    job.refresh_from_db()
    assert job.state == JobState.PENDING


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_cycles_never_admit_a_job_twice(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)
    jobs = [submit(annotations={SIM_DURATION: "600"}) for _ in range(12)]
    barrier = threading.Barrier(4)
    results: list[Any] = []

    def cycle() -> None:
        try:
            barrier.wait()
            results.append(run_cycle(backend=backend))
        finally:
            connection.close()

    threads = [threading.Thread(target=cycle) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted = [job_id for r in results for job_id in r.admitted]
    assert len(admitted) == len(set(admitted))
    assert sorted(admitted) == sorted(j.pk for j in jobs[: len(admitted)])
    for job in jobs:
        job.refresh_from_db()
        assert JobEvent.objects.filter(job=job, to_state=JobState.ADMITTED).count() <= 1
        assert job.attempts <= 1


def test_a_pending_job_gets_an_estimated_start_from_the_running_jobs_max_runtime(
    world: Any, submit: Any, backend: Any
) -> None:
    from gpuqueue.cycle.run import refresh_forecasts

    sync_cluster(backend)
    now = timezone.now()
    blockers = [
        submit(gpus_per_worker=8, max_runtime_seconds=3600, annotations={SIM_DURATION: "600"})
        for _ in range(4)
    ]
    run_cycle(backend=backend, now=now)
    # Same team, same priority: nothing to preempt; it waits for one of the four to end.
    waiting = submit(gpus_per_worker=8)
    run_cycle(backend=backend, now=now)
    assert refresh_forecasts(now=now) == 1
    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING
    # Every H100 is held by a job that may run for an hour: the estimate is about an hour out.
    eta = (waiting.estimated_start - now).total_seconds()
    assert 3600 - 120 <= eta <= 3600 + 300, eta
    assert len(blockers) == 4


def test_submissions_get_the_configured_checkpoint_grace(
    world: Any, submit: Any, settings: Any
) -> None:
    settings.GPUQUEUE_DEFAULT_CHECKPOINT_GRACE_SECONDS = 45
    assert submit().checkpoint_grace_seconds == 45
    assert submit(checkpoint_grace_seconds=300).checkpoint_grace_seconds == 300


def test_a_cycle_rewrites_only_the_pending_rows_whose_reason_or_position_moved(
    world: Any, submit: Any, backend: Any
) -> None:
    from django.test.utils import CaptureQueriesContext

    sync_cluster(backend)
    for _ in range(4):
        submit(
            user=world.carol,
            team=world.team_b,
            gpus_per_worker=8,
            annotations={SIM_DURATION: "600"},
        )
    run_cycle(backend=backend)
    waiting = [submit(gpus_per_worker=8, preemptible=False, priority=-1) for _ in range(3)]
    run_cycle(backend=backend)
    first = {j.pk: Job.objects.get(pk=j.pk).pending_reason for j in waiting}
    assert all(first.values())
    with CaptureQueriesContext(connection) as queries:
        run_cycle(backend=backend)
    assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert {j.pk: Job.objects.get(pk=j.pk).pending_reason for j in waiting} == first


def test_the_inventory_sync_writes_only_what_changed(
    world: Any, backend: Any, cluster_file: Any
) -> None:
    from django.test.utils import CaptureQueriesContext

    sync_cluster(backend)
    assert Node.objects.count() == 6
    with CaptureQueriesContext(connection) as queries:
        sync_cluster(backend)
    writes = [
        q["sql"] for q in queries.captured_queries if q["sql"].startswith(("UPDATE", "INSERT"))
    ]
    assert writes == []
    # A node that leaves the cluster file holds no new work.
    cluster_file.write_text(cluster_file.read_text().replace("count: 2", "count: 1"))
    os.utime(cluster_file, (3, 3))
    sync_cluster(backend)
    assert list(Node.objects.filter(ready=False).values_list("name", flat=True)) == ["l4-1"]


@pytest.mark.django_db(transaction=True)
def test_a_launch_that_ends_while_the_sync_reads_the_cluster_is_not_launched_again(
    world: Any, submit: Any, backend: Any
) -> None:
    """The watcher's pass reads the cluster while the worker's launch is still under way and
    decides after it ended: what the launch made is missing from the read, but is no job to
    launch a second time (a wave's last jobs were launched twice, meeting their own objects)."""
    sync_cluster(backend)
    job = submit()
    entered, go_on = threading.Event(), threading.Event()
    launches: list[list[int]] = []

    class LaunchingBackend(type(backend)):  # type: ignore[misc]
        def launch_all(self, specs: Any) -> Any:
            launches.append([spec.job_id for spec in specs])
            entered.set()
            go_on.wait(10)
            return super().launch_all(specs)

    launching = LaunchingBackend(backend.cluster_file, startup_seconds=0, checkpoint_seconds=0)

    def cycle() -> None:
        try:
            run_cycle(backend=launching)
        finally:
            connection.close()

    thread = threading.Thread(target=cycle)

    class ReadingBackend(type(backend)):  # type: ignore[misc]
        def observe(self) -> Any:
            seen = super().observe()  # the job's workload is not there yet
            go_on.set()
            thread.join(10)  # the launch ends meanwhile
            return seen

    reading = ReadingBackend(backend.cluster_file, startup_seconds=0, checkpoint_seconds=0)
    thread.start()
    assert entered.wait(10)
    assert sync_cluster(reading).relaunched == []
    assert not thread.is_alive()
    assert launches == [[job.pk]]
    sync_cluster(backend)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempts == 1
    assert SimulatedWorkload.objects.filter(job_id=job.pk).count() == 1


def test_a_job_whose_launch_recorded_its_workload_is_awaited_not_launched_again(
    world: Any, submit: Any, backend: Any
) -> None:
    """The watcher's copy follows a wave's creates seconds behind: an admitted job that it does
    not show yet, but whose launch recorded the Job it made, is late, not lost. It is launched
    again only once it has been missing RELAUNCH_AFTER since its admission (deleted by
    someone); a job whose launch recorded nothing is launched again at once."""
    from gpuqueue.cycle import cluster_sync
    from gpuqueue.models import WorkloadRecord

    class Late(type(backend)):  # type: ignore[misc]
        def launch_all(self, specs: Any) -> Any:
            return [None for _ in specs]  # made, but not in the copy yet

    late = Late(backend.cluster_file, startup_seconds=0, checkpoint_seconds=0)
    sync_cluster(backend)
    recorded, unrecorded = submit(), submit()
    run_cycle(backend=late)
    WorkloadRecord.objects.filter(job_id=recorded.pk, attempt=1).update(job_uid="uid-of-its-job")

    assert sync_cluster(late).relaunched == [unrecorded.pk]
    admitted = Job.objects.get(pk=recorded.pk).admitted_at
    assert admitted is not None
    later = admitted + cluster_sync.RELAUNCH_AFTER
    # (the unrecorded one is still without a workload: launched again as each pass finds it)
    assert sync_cluster(late, now=later).relaunched == [recorded.pk, unrecorded.pk]
