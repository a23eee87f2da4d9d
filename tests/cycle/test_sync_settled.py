"""The sync pass skips the savepoint of a job it would leave as it is (`_settled`): checked
against the plain path, `_follow`, over every state a job that holds GPUs can be in and every
status its workload can report."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuqueue.cluster.base import Phase, WorkloadStatus
from gpuqueue.core.states import JobState
from gpuqueue.cycle import cluster_sync
from gpuqueue.models import Job

HOLDING = [JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTING]
WRITES = ("INSERT", "UPDATE", "DELETE")


class Rollback(Exception):
    pass


statuses = st.one_of(
    st.none(),
    st.builds(
        WorkloadStatus,
        job_id=st.just(0),
        attempt=st.just(1),
        phase=st.sampled_from(list(Phase)),
        since=st.none()
        | st.integers(-7200, 0).map(lambda s: timezone.now() + timedelta(seconds=s)),
        exit_code=st.none() | st.integers(0, 255),
        checkpoint_location=st.none() | st.just("s3://ckpt/1"),
        start_failure=st.booleans(),
    ),
)


@pytest.fixture
def job(world: Any, submit: Any) -> Job:
    return submit(workers=1, gpus_per_worker=1)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    state=st.sampled_from(HOLDING),
    status=statuses,
    admitted_ago=st.integers(0, 7200),
    acked=st.booleans(),
    deadline_in=st.none() | st.integers(-600, 600),
    drained=st.booleans(),
)
def test_a_settled_job_is_one_follow_leaves_as_it_is(
    job: Job,
    state: JobState,
    status: WorkloadStatus | None,
    admitted_ago: int,
    acked: bool,
    deadline_in: int | None,
    drained: bool,
) -> None:
    now = timezone.now()
    fields = {
        "state": state,
        "admitted_at": now - timedelta(seconds=admitted_ago),
        "checkpoint_acked_at": now if acked and state == JobState.PREEMPTING else None,
        "checkpoint_deadline": None
        if deadline_in is None
        else now + timedelta(seconds=deadline_in),
    }
    try:
        with transaction.atomic():
            Job.objects.filter(pk=job.pk).update(**fields)
            row = Job.objects.select_related("team").get(pk=job.pk)
            draining = {"node-a"} if drained else set()
            settled = cluster_sync._settled(row, status, now, draining)
            # The pass decides on the brief tuple it reads: the same as on the row.
            (values,) = Job.objects.filter(pk=job.pk).values_list(*cluster_sync.BRIEF)
            brief = cluster_sync.Brief(*values)
            assert cluster_sync._settled(brief, status, now, draining) == settled
            assert cluster_sync._unlaunched(brief, status, draining) == cluster_sync._unlaunched(
                row, status, draining
            )
            if settled:
                assert cluster_sync._drained_node(row, status, draining) is None
            with CaptureQueriesContext(connection) as queries:
                followed = cluster_sync._follow(row, status, now)
            writes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(WRITES)]
            raise Rollback
    except Rollback:
        pass
    if settled:
        assert followed == (0, False)
        assert writes == []


def test_a_running_job_whose_gang_runs_is_settled_and_a_finished_one_is_not(job: Job) -> None:
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, admitted_at=now)
    row = Job.objects.get(pk=job.pk)
    running = WorkloadStatus(job.pk, 1, Phase.RUNNING, since=now)
    assert cluster_sync._settled(row, running, now)
    assert not cluster_sync._settled(
        row, WorkloadStatus(job.pk, 1, Phase.SUCCEEDED, since=now), now
    )
    assert not cluster_sync._settled(row, None, now)


def pass_after_a_cycle(submit: Any, backend: Any, n: int) -> tuple[list[Job], int]:
    """`n` one-GPU jobs submitted and admitted by a cycle, then one sync pass: the jobs as it
    left them, and the statements it made."""
    from gpuqueue.cycle.run import run_cycle

    jobs = [submit(workers=1, gpus_per_worker=1) for _ in range(n)]
    run_cycle(backend=backend)
    with CaptureQueriesContext(connection) as queries:
        cluster_sync.sync_cluster(backend)
    return [Job.objects.get(pk=j.pk) for j in jobs], len(queries)


def test_the_gangs_that_started_since_the_last_pass_start_in_one_move(
    world: Any, submit: Any, backend: Any
) -> None:
    from gpuqueue.models import JobEvent

    cluster_sync.sync_cluster(backend)
    two, statements_for_two = pass_after_a_cycle(submit, backend, 2)
    six, statements_for_six = pass_after_a_cycle(submit, backend, 6)
    assert statements_for_six == statements_for_two  # one move, however many started
    statuses = {s.job_id: s for s in backend.observe()}
    for job in two + six:
        assert job.state == JobState.RUNNING
        assert job.start_failures == 0
        assert job.started_at == statuses[job.pk].since
        events = JobEvent.objects.filter(job=job, to_state=JobState.RUNNING)
        assert [e.reason for e in events] == [cluster_sync.STARTED]


def test_an_unlaunched_job_is_one_follow_leaves_for_the_relaunch(job: Job) -> None:
    """`_unlaunched` (decided from the brief row) holds only where `_follow` makes no step and
    the plain path would relaunch: an admitted job without a workload, on no drained node."""
    now = timezone.now()
    for state in HOLDING:
        for drained in (False, True):
            Job.objects.filter(pk=job.pk).update(state=state, placement={"node-a": 1})
            row = Job.objects.select_related("team").get(pk=job.pk)
            draining = {"node-a"} if drained else set()
            unlaunched = cluster_sync._unlaunched(row, None, draining)
            assert unlaunched == (state == JobState.ADMITTED and not drained)
            if unlaunched:
                assert cluster_sync._drained_node(row, None, draining) is None
                assert cluster_sync._follow(row, None, now) == (0, False)


def test_admitted_jobs_whose_launch_is_in_flight_cost_the_pass_no_read_each(
    world: Any, submit: Any, backend: Any
) -> None:
    """A wave's launch takes a while: every pass meanwhile finds hundreds of admitted jobs
    without a workload. It leaves them to the launch (which holds the "launching" lock) with
    the same statements for six as for two."""
    from django.db import connections

    from gpuqueue.core.locks import LOCK_KEYS

    class Launching(type(backend)):  # type: ignore[misc]
        def launch_all(self, specs: Any) -> list[None]:
            return [None for _ in specs]  # still in flight: no workload yet

    launching = Launching(backend.cluster_file, startup_seconds=0, checkpoint_seconds=0)
    cluster_sync.sync_cluster(launching)
    other = connections.create_connection("default")
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock_shared(%s)", [LOCK_KEYS["launching"]])
    try:
        two, statements_for_two = pass_after_a_cycle(submit, launching, 2)
        six, statements_for_six = pass_after_a_cycle(submit, launching, 6)
    finally:
        other.close()
    assert statements_for_six == statements_for_two
    assert {j.state for j in two + six} == {JobState.ADMITTED}
