"""The scenarios of docs/architecture.md end to end: the real cycle, the cluster sync and the
simulated cluster on real PostgreSQL. Each test is named after the situation it reproduces."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from gpuqueue.core.reason_text import describe_reason
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, JobEvent, SimulatedWorkload

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


@pytest.fixture(autouse=True)
def no_minimum_runtime(settings: Any) -> None:
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0


def run_until_quiet(backend: Any, rounds: int = 4) -> None:
    for _ in range(rounds):
        run_cycle(backend=backend)
        sync_cluster(backend)


def finish(job: Job, backend: Any) -> None:
    SimulatedWorkload.objects.filter(job_id=job.pk).update(
        ends_at=timezone.now() - timedelta(seconds=1)
    )
    sync_cluster(backend)


def trail(job: Job) -> list[str]:
    return list(
        JobEvent.objects.filter(job=job).order_by("at", "id").values_list("to_state", flat=True)
    )


def test_1_the_half_placed_gang_creates_nothing_until_all_workers_fit(
    world: Any, submit: Any, backend: Any, settings: Any
) -> None:
    settings.GPUQUEUE_RECLAIM = False  # only capacity is in question here, not fair share
    sync_cluster(backend)
    # 26 of 32 H100 taken: 6 free, spread so that 3 workers of 2 GPUs fit.
    fillers = [
        submit(user=world.carol, team=world.team_b, gpus_per_worker=g, annotations=LONG)
        for g in (8, 8, 8, 2)
    ]
    run_until_quiet(backend)
    assert all(Job.objects.get(pk=j.pk).state == JobState.RUNNING for j in fillers)
    gang = submit(workers=4, gpus_per_worker=2)
    run_cycle(backend=backend)
    gang.refresh_from_db()
    assert gang.state == JobState.PENDING
    assert not SimulatedWorkload.objects.filter(job_id=gang.pk).exists()
    assert describe_reason(gang.pending_reason).startswith(
        "Waiting for 8 h100 GPUs as 4 × 2; 3 of 4 workers fit now; 6 GPUs free"
    )


def test_2_the_morning_grab_is_reclaimed_for_a_team_under_its_guarantee(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)
    grab = [submit(gpus_per_worker=8, annotations=LONG) for _ in range(4)]  # all 32 H100
    run_until_quiet(backend)
    assert {Job.objects.get(pk=j.pk).state for j in grab} == {JobState.RUNNING}

    b_job = submit(user=world.carol, team=world.team_b, gpus_per_worker=8, annotations=LONG)
    result = run_cycle(backend=backend)
    assert len(result.preempted) == 1  # the fewest victims that make room
    victim = Job.objects.get(pk=result.preempted[0])
    assert victim.team == world.team_a and victim.state == JobState.PREEMPTING
    assert victim.checkpoint_deadline is not None
    b_job.refresh_from_db()
    assert b_job.pending_reason["code"] == "waiting_for_preemption"

    run_until_quiet(backend)  # checkpoint acknowledged -> requeued -> B admitted
    b_job.refresh_from_db()
    victim.refresh_from_db()
    assert b_job.state == JobState.RUNNING
    assert victim.state == JobState.PENDING and victim.checkpoint_location.startswith("sim://")
    # A keeps at least its fair share (16 of 32 with equal weights): 24 GPUs still run.
    running_a = sum(j.gpus for j in Job.objects.filter(team=world.team_a, state=JobState.RUNNING))
    assert running_a == 24


def test_6_production_first_preempts_research_which_resumes_from_its_checkpoint(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)
    research = [submit(gpus_per_worker=8, priority=0, annotations=LONG) for _ in range(4)]
    run_until_quiet(backend)
    prod = submit(
        user=world.bob,
        gpus_per_worker=8,
        priority=100,
        preemptible=False,
        annotations={"gpuqueue.dev/sim-duration-seconds": "5"},
    )
    result = run_cycle(backend=backend)
    assert len(result.preempted) == 1
    victim = Job.objects.get(pk=result.preempted[0])
    assert victim.pk in {r.pk for r in research}
    submitted_at = victim.submitted_at

    run_until_quiet(backend)
    prod.refresh_from_db()
    victim.refresh_from_db()
    assert prod.state == JobState.RUNNING
    assert victim.state == JobState.PENDING and victim.submitted_at == submitted_at
    location = victim.checkpoint_location
    assert location

    finish(prod, backend)
    run_until_quiet(backend)
    victim.refresh_from_db()
    assert victim.state == JobState.RUNNING and victim.attempts == 2
    resumed = SimulatedWorkload.objects.get(job_id=victim.pk, attempt=2)
    assert resumed.env["GPUQUEUE_RESUME"] == "1"
    assert resumed.env["GPUQUEUE_CHECKPOINT"] == location
    assert trail(victim) == [
        "PENDING",
        "ADMITTED",
        "RUNNING",
        "PREEMPTING",
        "PREEMPTING",
        "PENDING",
        "ADMITTED",
        "RUNNING",
    ]


def test_6_the_preempted_job_does_not_take_its_gpus_back_even_when_it_has_waited_longest(
    world: Any, submit: Any, backend: Any, settings: Any
) -> None:
    # Every job starving at once: the research job, requeued with its old submission time, has
    # waited longer than the production job it gave way to. It used to start again on the GPUs
    # it had just freed, and production preempted it again, cycle after cycle.
    settings.GPUQUEUE_STARVATION_SECONDS = 0
    sync_cluster(backend)
    research = [submit(gpus_per_worker=8, priority=0, annotations=LONG) for _ in range(4)]
    run_until_quiet(backend)
    prod = submit(user=world.bob, gpus_per_worker=8, priority=100, annotations=LONG)
    result = run_cycle(backend=backend)
    assert len(result.preempted) == 1
    victim = Job.objects.get(pk=result.preempted[0])

    run_until_quiet(backend, rounds=6)
    prod.refresh_from_db()
    victim.refresh_from_db()
    assert prod.state == JobState.RUNNING and prod.attempts == 1
    assert victim.state == JobState.PENDING and victim.attempts == 1
    assert {j.pk for j in research} - {victim.pk} == set(
        Job.objects.filter(pk__in=[r.pk for r in research], state=JobState.RUNNING).values_list(
            "pk", flat=True
        )
    )


def test_6_non_preemptible_jobs_are_never_touched(world: Any, submit: Any, backend: Any) -> None:
    sync_cluster(backend)
    keep = submit(gpus_per_worker=8, priority=0, preemptible=False, annotations=LONG)
    fill = [submit(gpus_per_worker=8, priority=0, annotations=LONG) for _ in range(3)]
    run_until_quiet(backend)
    urgent = submit(user=world.bob, gpus_per_worker=8, priority=100, annotations=LONG)
    result = run_cycle(backend=backend)
    # One preemptible research job makes room; the non-preemptible one is never the victim.
    assert len(result.preempted) == 1 and result.preempted[0] in {j.pk for j in fill}
    keep.refresh_from_db()
    urgent.refresh_from_db()
    assert keep.state == JobState.RUNNING
    assert urgent.pending_reason["code"] == "waiting_for_preemption"


def test_7_the_pipeline_that_retries_gets_exactly_one_job(
    world: Any, submit: Any, backend: Any
) -> None:
    first = submit(key="nightly-2026-11-22", workers=2, gpus_per_worker=8)
    for _ in range(3):
        assert submit(key="nightly-2026-11-22", workers=2, gpus_per_worker=8).pk == first.pk
    assert Job.objects.count() == 1


def test_8_over_the_limit_says_so_with_numbers(world: Any, submit: Any, backend: Any) -> None:
    from gpuqueue.models import Quota

    sync_cluster(backend)
    Quota.objects.filter(team=world.team_a, flavor=world.h100).update(guarantee=8, limit=16)
    running = submit(gpus_per_worker=8, workers=2, annotations=LONG)
    run_until_quiet(backend)
    waiting = submit(gpus_per_worker=4)
    run_cycle(backend=backend)
    waiting.refresh_from_db()
    assert running.pk != waiting.pk and waiting.state == JobState.PENDING
    assert describe_reason(waiting.pending_reason) == (
        "Over the team's limit: 16 of 16 h100 GPUs in use and this job asks for 4."
    )


def test_8_a_gang_passed_by_its_teams_newer_jobs_says_so(
    world: Any, submit: Any, backend: Any
) -> None:
    from gpuqueue.models import Quota

    sync_cluster(backend)
    Quota.objects.filter(flavor=world.h100).update(guarantee=16, limit=32)
    own = [submit(gpus_per_worker=8, annotations=LONG) for _ in range(2)]
    for _ in range(2):
        submit(user=world.carol, team=world.team_b, gpus_per_worker=8, annotations=LONG)
    run_until_quiet(backend)  # the 32 GPUs are held, 16 by each team: their fair shares
    gang = submit(workers=2, gpus_per_worker=8)
    run_cycle(backend=backend)
    finish(own[0], backend)
    newer = submit(gpus_per_worker=8, annotations=LONG)  # submitted after the gang, smaller
    run_until_quiet(backend)
    gang.refresh_from_db()
    assert Job.objects.get(pk=newer.pk).state == JobState.RUNNING
    assert gang.state == JobState.PENDING
    assert describe_reason(gang.pending_reason) == (
        "Waiting for 16 h100 GPUs as 2 × 8; 0 of 2 workers fit now; 0 GPUs free. Its team "
        "holds 16 h100 GPUs against a fair share of 16, 8 of them in jobs that started after "
        "this one was submitted (a team's other jobs start whenever they fit): this job can "
        "start within the share only once the team's running jobs leave 16 of its GPUs free "
        "together, or on GPUs that other teams leave free."
    )


def test_4_mig_slices_have_their_own_quota(
    world: Any, submit: Any, backend: Any, cluster_file: Any
) -> None:
    import os

    from gpuqueue.models import Flavor, Quota

    cluster_file.write_text(
        cluster_file.read_text()
        + "  - name: a100-mig-0\n    labels: {nvidia.com/mig.capable: 'true'}\n"
        + "    capacity: {nvidia.com/mig-1g.10gb: 7}\n"
    )
    os.utime(cluster_file, (2, 2))
    mig = Flavor.objects.create(name="mig-1g-10gb", resource_name="nvidia.com/mig-1g.10gb")
    Quota.objects.create(team=world.team_a, flavor=mig, guarantee=2, limit=3)
    sync_cluster(backend)
    servers = [submit(flavor=mig, name=f"server-{i}", annotations=LONG) for i in range(4)]
    h100 = submit(gpus_per_worker=8, annotations=LONG)
    run_until_quiet(backend)
    states = [Job.objects.get(pk=j.pk).state for j in servers]
    assert states.count(JobState.RUNNING) == 3 and states.count(JobState.PENDING) == 1
    assert all(
        next(iter(Job.objects.get(pk=j.pk).placement), "a100-mig-0") == "a100-mig-0"
        for j in servers
    )
    # Slices do not count against the team's whole-GPU quota.
    assert Job.objects.get(pk=h100.pk).state == JobState.RUNNING
    waiting = next(j for j in servers if Job.objects.get(pk=j.pk).state == JobState.PENDING)
    waiting.refresh_from_db()
    assert waiting.pending_reason["code"] == "over_limit"
    assert waiting.pending_reason["numbers"]["limit"] == 3
