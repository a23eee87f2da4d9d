"""`GET /api/v1/jobs/?ordering=…`: every sortable column, both ways, paged by keyset cursors
that cover every job once in the promised order, ties broken by id."""

from __future__ import annotations

import json
from base64 import urlsafe_b64encode
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.job_times import elapsed_seconds, waited_seconds
from gpuqueue.api.job_ordering import Cursor
from gpuqueue.core.job_order import SORT_KEYS, UNRANKED, Ordering
from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from tests.standings import show


def expected_key(key: str, job: Job, now: datetime) -> Any:
    """The order a user is promised, computed in Python from the job's own fields."""
    ran = elapsed_seconds(job, now) or 0.0
    return {
        "id": job.pk,
        "name": job.name,
        "team": job.team.slug,
        "user": job.user.username,
        "flavor": job.flavor.name,
        "gpus": job.workers * job.gpus_per_worker,
        "state": job.state,
        "priority": job.priority,
        "position": job.cluster_position or UNRANKED,
        "submitted_at": job.submitted_at,
        "waited": waited_seconds(job, now),
        "ran": ran,
        "gpu_hours": job.workers * job.gpus_per_worker * ran,
    }[key]


def walk(client: Any, query: str) -> tuple[list[int], datetime | None, str | None]:
    """Every page's ids, following `next`; the instant the cursor pinned; and the last page's
    `previous` link."""
    url: str | None = f"/api/v1/jobs/?{query}"
    ids: list[int] = []
    now = None
    previous = None
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        ids += [row["id"] for row in body["results"]]
        url, previous = body["next"], body["previous"]
        if url and now is None:
            cursor = parse_qs(urlsplit(url).query)["cursor"][0]
            now = Cursor.decode(cursor, _ordering(query)).now
    return ids, now, previous


def walk_back(client: Any, url: str | None) -> list[int]:
    """Every page's ids before the one `url` was the `previous` link of, following `previous`."""
    ids: list[int] = []
    while url:
        body = client.get(url).json()
        ids = [row["id"] for row in body["results"]] + ids
        url = body["previous"]
    return ids


def _ordering(query: str) -> Ordering:
    for part in query.split("&"):
        if part.startswith("ordering="):
            return Ordering.parse(part.split("=", 1)[1])
    return Ordering("id", descending=True)


# Jobs as the cycle and the cluster leave them: some pending (waiting so far), some running,
# some finished; names, teams and times repeat so that ties are common.
job_rows = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["a", "b", "ab"]),
            "team_b": st.booleans(),
            "state": st.sampled_from([JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED]),
            "workers": st.integers(1, 2),
            "gpus_per_worker": st.integers(1, 4),
            "priority": st.integers(0, 2),
            "position": st.none() | st.integers(1, 3),
            "submitted": st.integers(0, 4),  # minutes before the base
            "waited": st.integers(0, 3),
            "ran": st.integers(0, 3),
        }
    ),
    min_size=1,
    max_size=9,
)


def make_jobs(world: Any, rows: list[dict[str, Any]], base: datetime) -> None:
    Job.objects.all().delete()
    jobs = []
    for row in rows:
        submitted = base - timedelta(minutes=10 + row["submitted"])
        job = Job(
            name=row["name"],
            image="ghcr.io/acme/train:1",
            team=world.team_b if row["team_b"] else world.team_a,
            user=world.carol if row["team_b"] else world.alice,
            flavor=world.h100,
            workers=row["workers"],
            gpus_per_worker=row["gpus_per_worker"],
            priority=row["priority"],
            state=row["state"],
        )
        if row["state"] != JobState.PENDING:
            job.admitted_at = submitted + timedelta(minutes=row["waited"])
            job.started_at = job.admitted_at
        if row["state"] == JobState.SUCCEEDED:
            job.finished_at = job.started_at + timedelta(minutes=row["ran"])
        jobs.append(job)
    made = Job.objects.bulk_create(jobs)
    # submitted_at is auto_now_add: set it afterwards, as a clock would have.
    for job, row in zip(made, rows, strict=True):
        submitted = base - timedelta(minutes=10 + row["submitted"])
        Job.objects.filter(pk=job.pk).update(submitted_at=submitted)
        if row["state"] == JobState.PENDING and row["position"] is not None:
            show(job.pk, cluster_position=row["position"])


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=job_rows,
    key=st.sampled_from(sorted(SORT_KEYS)),
    descending=st.booleans(),
    page_size=st.integers(1, 4),
)
def test_cursor_pages_cover_every_job_once_in_the_promised_order(
    api: Any, world: Any, rows: list[dict[str, Any]], key: str, descending: bool, page_size: int
) -> None:
    from django.utils import timezone

    make_jobs(world, rows, timezone.now())
    ordering = f"-{key}" if descending else key
    client = api("root")
    ids, now, previous = walk(client, f"ordering={ordering}&page_size={page_size}")
    assert sorted(ids) == sorted(Job.objects.values_list("id", flat=True))
    assert len(ids) == len(set(ids))
    # Back from the last page: the same rows, in the same order, in the same pages.
    last_page = len(ids) % page_size or page_size
    assert walk_back(client, previous) == ids[:-last_page]
    if now is None:  # one page: the server's instant is between these two
        now = timezone.now()
    jobs = Job.objects.select_related("team", "user", "flavor").in_bulk(ids)
    want = sorted(ids, key=lambda i: (expected_key(key, jobs[i], now), i), reverse=descending)
    assert ids == want


def test_previous_walks_back_over_the_same_rows(api: Any, submit: Any) -> None:
    for name in ["c", "a", "b", "a", "c", "b", "a"]:
        submit(name=name)
    client = api("alice")
    first = client.get("/api/v1/jobs/?ordering=name&page_size=3").json()
    second = client.get(first["next"]).json()
    third = client.get(second["next"]).json()
    assert third["next"] is None
    back = client.get(third["previous"]).json()
    assert [j["id"] for j in back["results"]] == [j["id"] for j in second["results"]]
    again = client.get(back["previous"]).json()
    assert [j["id"] for j in again["results"]] == [j["id"] for j in first["results"]]
    assert again["previous"] is None
    names = [j["name"] for page in (first, second, third) for j in page["results"]]
    assert names == ["a", "a", "a", "b", "b", "c", "c"]


def test_a_cursor_survives_new_submissions(api: Any, submit: Any) -> None:
    # A pipeline pages by name while others submit: nothing seen twice, nothing lost of what
    # existed when it started.
    made = [submit(name=n).pk for n in ["b", "d", "f", "h"]]
    client = api("alice")
    first = client.get("/api/v1/jobs/?ordering=name&page_size=2").json()
    submit(name="a")
    submit(name="e")
    seen = [j["id"] for j in first["results"]]
    url = first["next"]
    while url:
        page = client.get(url).json()
        seen += [j["id"] for j in page["results"]]
        url = page["next"]
    assert set(made) <= set(seen) and len(seen) == len(set(seen))
    assert Job.objects.get(name="e").pk in seen  # after the cursor: seen; "a" before it: not


@pytest.mark.parametrize("value", ["nmae", "-", "--name", "name,id", "waited;drop"])
def test_an_unknown_ordering_is_refused_with_the_valid_ones(api: Any, value: str) -> None:
    response = api("alice").get("/api/v1/jobs/", {"ordering": value})
    assert response.status_code == 400
    message = response.json()["error"]["fields"]["ordering"][0]
    assert f"Unknown ordering {value!r}" in message
    assert all(key in message for key in SORT_KEYS)


def test_ordering_takes_any_case(api: Any, submit: Any) -> None:
    small, big = submit(workers=1), submit(workers=4)
    for value in ("-GPUS", "-gpus", "-Gpus"):
        ids = [
            j["id"] for j in api("alice").get(f"/api/v1/jobs/?ordering={value}").json()["results"]
        ]
        assert ids == [big.pk, small.pk]


def test_a_cursor_of_another_ordering_is_not_found(api: Any, submit: Any) -> None:
    for _ in range(3):
        submit()
    client = api("alice")
    by_name = client.get("/api/v1/jobs/?ordering=name&page_size=1").json()["next"]
    cursor = quote(parse_qs(urlsplit(by_name).query)["cursor"][0])
    assert client.get(f"/api/v1/jobs/?ordering=-waited&cursor={cursor}").status_code == 404
    assert client.get(f"/api/v1/jobs/?ordering=name&cursor={cursor}").status_code == 200


def test_ordering_shows_only_what_the_filters_and_the_team_allow(
    api: Any, submit: Any, world: Any
) -> None:
    mine = submit(name="z")
    submit(world.carol, team=world.team_b, name="a")
    response = api("alice").get("/api/v1/jobs/?ordering=name")
    assert [j["id"] for j in response.json()["results"]] == [mine.pk]


def test_the_cli_lists_in_the_same_ordering(cli: Any, submit: Any, capsys: Any) -> None:
    small, big, middle = submit(workers=1), submit(workers=4), submit(workers=2)
    assert cli("--json", "list", "--ordering=-gpus") == 0
    out = capsys.readouterr().out
    assert [j["id"] for j in json.loads(out[out.index("[") :])] == [big.pk, middle.pk, small.pk]
    assert cli("list", "--ordering", "biggest") != 0
    err = capsys.readouterr().err
    assert "Unknown ordering 'biggest'" in err and "gpu_hours" in err


def test_the_queue_cut_by_limit_keeps_the_running_jobs_and_the_head_of_the_line(
    cli: Any, submit: Any, capsys: Any
) -> None:
    running = submit(name="old-running")
    Job.objects.filter(pk=running.pk).update(state=JobState.RUNNING)
    # Newest submitted, worst placed: the newest-first list would show these first.
    for position, name in [(1, "head"), (2, "second"), (3, "third")][::-1]:
        job = submit(name=name)
        show(job.pk, cluster_position=position)
    assert cli("--json", "queue", "--limit", "3") == 0
    out = capsys.readouterr().out
    assert [j["name"] for j in json.loads(out[out.index("[") :])] == [
        "old-running",
        "head",
        "second",
    ]


@pytest.mark.parametrize(
    "position", [10**400, "1", None, True, float("inf"), "x" * 2000, "2026-11-24T12:00:00"]
)
def test_a_tampered_cursor_is_not_found_rather_than_an_error(
    api: Any, submit: Any, position: Any
) -> None:
    submit()
    now = "2026-11-24T12:00:00+00:00"
    for ordering in ("-waited", "name", "submitted_at", "gpus"):
        raw = json.dumps([ordering, position, 1, now, False]).replace("Infinity", "1e999")
        cursor = quote(urlsafe_b64encode(raw.encode()).decode())
        response = api("alice").get(f"/api/v1/jobs/?ordering={ordering}&cursor={cursor}")
        assert response.status_code in (200, 404), (ordering, position, response.content)
        if ordering != "name":  # only a text key may take a string, any string
            assert response.status_code == 404, (ordering, position)
