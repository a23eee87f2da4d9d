"""The job list shows an array as one row (squeue's label, counts, limit, next start,
finish), expandable to its tasks, with a sentence for the tasks its limit holds back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobHold
from gpuqueue.services.jobs.array_spec import parse
from gpuqueue.services.jobs.arrays import hold_over_limit, submit_array
from gpuqueue.services.jobs.dependencies import Dependencies
from tests.dashboard.conftest import run_on


@pytest.fixture
def sweep(world: Any, nodes: Any) -> Any:
    """alice's array of 10 tasks, 2 at a time, each declaring 10 minutes: tasks 0 and 1 run
    (started 2 and 7 minutes ago), the rest are held by the limit."""
    fields = {"name": "sweep", "image": "ghcr.io/acme/train:1", "expected_runtime_seconds": 600}
    array = submit_array(
        world.alice, world.team_a, world.h100, fields, parse("0-9%2"), Dependencies()
    ).array
    for index, ago in ((0, 2), (1, 7)):
        task = Job.objects.get(array=array, array_index=index)
        run_on(task, "h100-0", started_ago=timedelta(minutes=ago))
    hold_over_limit()
    return array


def test_an_array_is_one_row_with_its_counts_limit_next_start_and_finish(
    clients: Any, sweep: Any, jobs: Any
) -> None:
    html = clients["alice"].get("/jobs/").content.decode()
    assert html.count(f'data-array-id="{sweep.pk}"') == 1
    # No row per task; the ordinary jobs are still there.
    assert 'class="task-row"' not in html
    assert f'data-job-id="{jobs.a_pending.pk}"' in html
    assert f"{sweep.pk}_[2-9%2]" in html
    assert "2 running, 8 pending" in html and "2 at a time" in html
    assert 'class="array-next"' in html and 'class="array-finish"' in html  # both computable
    assert "not estimated yet" not in html.split(f'data-array-id="{sweep.pk}"')[1].split("</tr>")[0]


def test_expanding_an_array_lists_its_tasks_with_a_sentence_for_the_held_ones(
    clients: Any, sweep: Any
) -> None:
    html = clients["alice"].get(f"/jobs/?expand={sweep.pk}").content.decode()
    assert html.count('class="task-row"') == 10
    assert f">{sweep.pk}_3<" in html
    # Task 2 takes the slot of task 1 (started first, ends first), task 3 that of task 0.
    assert "Task 2 of 10: the array runs 2 at a time; it starts as task 1 finishes." in html
    assert "Task 3 of 10: the array runs 2 at a time; it starts as task 0 finishes." in html
    assert 'aria-expanded="true"' in html
    # The poll keeps it expanded; a second click collapses it.
    assert f"expand={sweep.pk}" in html.split('id="job-table"')[1].split(">")[0]
    collapsed = clients["alice"].get("/jobs/").content.decode()
    assert 'aria-expanded="false"' in collapsed


def test_a_filter_keeps_an_array_row_while_one_task_matches(clients: Any, sweep: Any) -> None:
    running = clients["alice"].get("/jobs/?state=running").content.decode()
    assert running.count(f'data-array-id="{sweep.pk}"') == 1
    Job.objects.filter(array=sweep).update(state=JobState.CANCELLED, finished_at=timezone.now())
    assert (
        f'data-array-id="{sweep.pk}"'
        not in clients["alice"].get("/jobs/?state=running").content.decode()
    )


def test_another_team_sees_no_array_row(clients: Any, sweep: Any) -> None:
    html = clients["carol"].get(f"/jobs/?expand={sweep.pk}").content.decode()
    assert f'data-array-id="{sweep.pk}"' not in html and "task-row" not in html


def test_the_polling_stops_once_every_task_of_the_array_ended(clients: Any, sweep: Any) -> None:
    assert clients["alice"].get("/jobs/", HTTP_HX_REQUEST="true").status_code == 200
    Job.objects.filter(array=sweep).update(
        state=JobState.SUCCEEDED, finished_at=timezone.now(), hold=JobHold.NONE
    )
    assert clients["alice"].get("/jobs/", HTTP_HX_REQUEST="true").status_code == 286


def test_a_held_tasks_page_says_when_it_starts(clients: Any, sweep: Any) -> None:
    task = Job.objects.get(array=sweep, array_index=2)
    html = clients["alice"].get(f"/jobs/{task.pk}/").content.decode()
    slot = html.split('id="job-slot">')[1].split("</dd>")[0]
    assert "Task 2 of 10: the array runs 2 at a time; it starts as task 1 finishes." in slot
    eta = html.split('id="job-eta">')[1].split("</dd>")[0]
    # Task 1 declared 10 minutes and has run 7: in about 3.
    assert 'data-local="stamp"' in eta and "when its slot frees" in eta
    running = Job.objects.get(array=sweep, array_index=0)
    assert 'id="job-slot"' not in clients["alice"].get(f"/jobs/{running.pk}/").content.decode()
