"""The job list sorted by the server, by any column, with the sort kept in the URL next to the
filters; the same keys as the API's `?ordering=`."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from gpuqueue.core.job_order import SORT_KEYS
from gpuqueue.models import Job


def row_ids(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-job-id="(\d+)"', page)]


def header(page: str, label: str) -> str:
    """The <th> whose link reads `label`."""
    for th in re.findall(r"<th scope=\"col\"[^>]*>.*?</th>", page):
        if re.search(rf">{re.escape(label)}(<span|</a>)", th):
            return html.unescape(th)
    raise AssertionError(f"no header {label!r}")


def test_a_header_sorts_by_its_column_and_a_second_click_reverses_it(
    clients: Any, jobs: Any
) -> None:
    root = clients["root"]
    page = root.get("/jobs/").content.decode()
    name = header(page, "Name")
    assert 'href="?ordering=name"' in name and "aria-sort" not in name
    assert 'aria-sort="descending"' in header(page, "Submitted")  # the default sort

    by_name = root.get("/jobs/?ordering=name").content.decode()
    assert 'aria-sort="ascending"' in header(by_name, "Name")
    assert 'href="?ordering=-name"' in header(by_name, "Name")
    assert "aria-sort" not in header(by_name, "Submitted")
    names = ["a-pending", "a-running", "b-done", "b-running"]
    ids = {j.name: j.pk for j in Job.objects.all()}
    assert row_ids(by_name) == [ids[n] for n in names]
    by_name_down = root.get("/jobs/?ordering=-name").content.decode()
    assert row_ids(by_name_down) == [ids[n] for n in names[::-1]]


def test_the_biggest_job_first_by_gpus(clients: Any, jobs: Any) -> None:
    page = clients["root"].get("/jobs/?ordering=-gpus").content.decode()
    # 4 × 8, 2 × 4, 1 × 2, 1 × 1
    assert row_ids(page) == [
        jobs.a_pending.pk,
        jobs.a_running.pk,
        jobs.b_running.pk,
        jobs.b_done.pk,
    ]


def test_the_longest_wait_first(clients: Any, jobs: Any) -> None:
    # The pending job has waited an hour so far; the others started (or ended) within minutes.
    Job.objects.filter(pk=jobs.a_pending.pk).update(
        submitted_at=timezone.now() - timedelta(hours=1)
    )
    page = clients["alice"].get("/jobs/?ordering=-waited").content.decode()
    assert row_ids(page)[0] == jobs.a_pending.pk
    page = clients["alice"].get("/jobs/?ordering=-ran").content.decode()
    assert row_ids(page) == [jobs.a_running.pk, jobs.a_pending.pk]  # it ran; the other did not


@pytest.mark.parametrize("key", sorted(SORT_KEYS))
def test_every_key_sorts_both_ways_and_shows_only_the_viewers_jobs(
    clients: Any, jobs: Any, key: str
) -> None:
    for ordering in (key, f"-{key}"):
        response = clients["alice"].get("/jobs/", {"ordering": ordering})
        assert response.status_code == 200
        ids = row_ids(response.content.decode())
        assert sorted(ids) == sorted([jobs.a_running.pk, jobs.a_pending.pk])


def test_the_sort_stays_next_to_the_filters(clients: Any, jobs: Any) -> None:
    page = clients["root"].get("/jobs/?state=running&ordering=-gpus").content.decode()
    # Another header keeps the filter; the filter form keeps the sort; the table's poll both.
    assert "state=running&ordering=team" in header(page, "Team")
    assert '<input type="hidden" name="ordering" value="-gpus">' in page
    assert "?state=running&amp;ordering=-gpus" in page
    assert row_ids(page) == [jobs.a_running.pk]


def test_further_pages_keep_the_sort(clients: Any, world: Any, nodes: Any, submit: Any) -> None:
    for i in range(51):
        submit(world.alice, name=f"job-{i:02d}")
    first = clients["alice"].get("/jobs/?ordering=name").content.decode()
    assert 'href="?ordering=name&amp;page=2">next →</a>' in first
    second = clients["alice"].get("/jobs/?ordering=name&page=2").content.decode()
    assert len(row_ids(second)) == 1
    assert ">job-50</a>" in second


def test_an_unknown_sort_is_said_and_the_list_shown_newest_first(clients: Any, jobs: Any) -> None:
    response = clients["alice"].get("/jobs/?ordering=nmae")
    assert response.status_code == 200
    page = response.content.decode()
    problem = page[page.index('id="sort-problem"') :]
    assert "Unknown ordering &#x27;nmae&#x27;" in problem and "gpu_hours" in problem
    assert row_ids(page) == [jobs.a_pending.pk, jobs.a_running.pk]
