"""The array page (counts, grid, cancel all or some) and the job page's dependencies, as each
persona sees them."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.jobs.array_spec import parse
from gpuqueue.services.jobs.arrays import submit_array
from gpuqueue.services.jobs.dependencies import Dependencies, submit_job_after


@pytest.fixture
def array(world: Any, nodes: Any) -> Any:
    fields = {"name": "sweep", "image": "ghcr.io/acme/train:1"}
    return submit_array(
        world.alice, world.team_a, world.h100, fields, parse("0-5%2"), Dependencies()
    ).array


def test_the_array_page_counts_tasks_and_draws_one_cell_per_task(clients: Any, array: Any) -> None:
    page = clients["bob"].get(f"/arrays/{array.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count('class="task task-pending"') == 6
    assert 'id="cancel-tasks"' in html  # bob is team-a's admin
    assert "at most 2 holding GPUs at once" in html
    assert "<script>" not in html and "style=" not in html  # nothing the CSP would block
    assert clients["carol"].get(f"/arrays/{array.pk}/").status_code == 404


def test_cancel_some_tasks_then_the_rest_from_the_page(clients: Any, array: Any) -> None:
    url = f"/arrays/{array.pk}/cancel/"
    assert clients["carol"].post(url, {}).status_code == 404
    assert clients["alice"].post(url, {"indices": "0-1"}).status_code == 303
    cancelled = Job.objects.filter(array=array, state=JobState.CANCELLED)
    assert sorted(cancelled.values_list("array_index", flat=True)) == [0, 1]
    bad = clients["alice"].post(url, {"indices": "x"})
    assert bad.status_code == 422 and b"is not an index or a range" in bad.content
    assert clients["alice"].post(url, {}).status_code == 303
    assert not Job.objects.filter(array=array).exclude(state=JobState.CANCELLED).exists()
    done = clients["alice"].get(f"/arrays/{array.pk}/", HTTP_HX_REQUEST="true")
    assert done.status_code == 286  # nothing can change: the polling stops


def test_a_tasks_page_links_its_array(clients: Any, array: Any) -> None:
    task = Job.objects.get(array=array, array_index=3)
    html = clients["alice"].get(f"/jobs/{task.pk}/").content.decode()
    assert f'href="/arrays/{array.pk}/"' in html and "task 3 of array" in html


def _train_after(world: Any, kind: str, upstream: Job) -> Job:
    """alice's job "train", waiting (as `kind` says) for `upstream`."""
    fields = {"name": "train", "image": "ghcr.io/acme/train:1", kind: [upstream.pk]}
    return submit_job_after(world.alice, world.team_a, world.h100, fields).job


def test_the_job_page_shows_upstream_and_downstream_jobs_with_states(
    clients: Any, world: Any, nodes: Any, submit: Any
) -> None:
    prep = submit(name="prep")
    train = _train_after(world, "after_ok", prep)
    downstream = clients["alice"].get(f"/jobs/{train.pk}/").content.decode()
    assert 'id="upstream"' in downstream and f'href="/jobs/{prep.pk}/"' in downstream
    assert f"Waiting for job #{prep.pk} to succeed (pending now)." in downstream
    upstream = clients["bob"].get(f"/jobs/{prep.pk}/").content.decode()
    assert 'id="downstream"' in upstream and f'href="/jobs/{train.pk}/"' in upstream


def test_the_dependencies_panel_refreshes_itself_until_every_job_shown_has_ended(
    clients: Any, world: Any, nodes: Any, submit: Any
) -> None:
    prep = submit(name="prep")
    train = _train_after(world, "after_any", prep)
    page = clients["alice"].get(f"/jobs/{train.pk}/").content.decode()
    assert f'hx-get="/jobs/{train.pk}/dependencies/"' in page  # the panel polls
    url = f"/jobs/{train.pk}/dependencies/"
    assert clients["carol"].get(url, HTTP_HX_REQUEST="true").status_code == 404
    Job.objects.filter(pk=prep.pk).update(state=JobState.FAILED, finished_at=timezone.now())
    # The upstream ended but train has not: the panel shows it and keeps polling.
    live = clients["alice"].get(url, HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and "state-failed" in live.content.decode()
    assert f'hx-get="{url}"' in live.content.decode()
    Job.objects.filter(pk=train.pk).update(state=JobState.CANCELLED, finished_at=timezone.now())
    done = clients["alice"].get(url, HTTP_HX_REQUEST="true")
    assert done.status_code == 286 and 'hx-get="' not in done.content.decode()
    # The upstream's page lists train too, and with both ended its panel does not poll.
    upstream = clients["alice"].get(f"/jobs/{prep.pk}/").content.decode()
    assert 'id="downstream"' in upstream and "/dependencies/" not in upstream
