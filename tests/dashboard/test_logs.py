"""The job page's logs panel: rendered with the page, one worker at a time, polling while
the job can still write, and readable by whoever may read the job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuqueue.cluster.simulated import DURATION_ANNOTATION
from gpuqueue.models import Job
from tests.api.test_logs import start_job

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def ran(world: Any, submit: Any, cluster_file: Path, backend: Any) -> Job:
    """alice's 2-worker job that ran 20 s on the simulated cluster (its job still RUNNING)."""
    return start_job(submit(workers=2, annotations={DURATION_ANNOTATION: "20"}), cluster_file)


def test_the_job_page_renders_the_panel_with_its_lines_at_once(clients: Any, ran: Job) -> None:
    body = clients["alice"].get(f"/jobs/{ran.pk}/").content.decode()
    # No empty panel on first render: the lines are in the page; htmx only refreshes them.
    assert "worker 0 exited with code 0\n</pre>" in body
    assert f'hx-get="/jobs/{ran.pk}/logs/?worker=0" hx-trigger="every 3s"' in body
    assert 'hx-trigger="load"' not in body
    assert "<script" not in body.split("<main", 1)[1]  # nothing inline: the CSP allows none


def test_the_panel_shows_the_chosen_workers_last_lines_and_polls(clients: Any, ran: Job) -> None:
    response = clients["alice"].get(f"/jobs/{ran.pk}/logs/?worker=1", **HTMX)
    assert response.status_code == 200
    body = response.content.decode()
    assert "worker 1 exited with code 0\n</pre>" in body
    assert "step 20 loss" in body and "step 1 loss" in body
    assert '<option value="1" selected>1</option>' in body
    assert f'hx-get="/jobs/{ran.pk}/logs/?worker=1" hx-trigger="every 3s"' in body


def test_a_finished_job_s_panel_stops_polling(clients: Any, ran: Job) -> None:
    from django.utils import timezone

    Job.objects.filter(pk=ran.pk).update(state="SUCCEEDED", finished_at=timezone.now())
    response = clients["alice"].get(f"/jobs/{ran.pk}/logs/", **HTMX)
    assert response.status_code == 286
    assert "every 3s" not in response.content.decode()


def test_a_job_that_never_started_says_so_in_the_panel(
    clients: Any, world: Any, submit: Any
) -> None:
    job = submit(world.alice)
    body = clients["bob"].get(f"/jobs/{job.pk}/logs/", **HTMX).content.decode()
    assert f"job {job.pk} has not started" in body


def test_without_htmx_the_panel_is_a_page_of_its_own(clients: Any, ran: Job) -> None:
    body = clients["alice"].get(f"/jobs/{ran.pk}/logs/?worker=0").content.decode()
    assert "<html" in body and "worker 0 exited with code 0" in body


@pytest.mark.parametrize(("persona", "want"), [("bob", 200), ("carol", 404), ("root", 200)])
def test_only_who_may_read_the_job_reads_its_logs(
    clients: Any, ran: Job, persona: str, want: int
) -> None:
    assert clients[persona].get(f"/jobs/{ran.pk}/logs/", **HTMX).status_code == want
