"""Every page as every persona: who may see what (another team's job and team answer 404)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db

SIGNED_IN = ("alice", "bob", "carol", "root")


def _url(name: str, world: Any, jobs: Any) -> str:
    return {
        "home": "/",
        "jobs": "/jobs/",
        "old_job_link": "/?state=pending&team=team-a",
        "home_filtered": "/jobs/?state=pending&team=team-a&q=a-&mine=1&flavor=h100",
        "submit": "/jobs/new/",
        "submit_preset": "/jobs/new/?preset=distributed",
        "job_a": f"/jobs/{jobs.a_running.pk}/",
        "job_a_pending": f"/jobs/{jobs.a_pending.pk}/",
        "job_b": f"/jobs/{jobs.b_running.pk}/",
        "logs_a": f"/jobs/{jobs.a_running.pk}/logs/",
        "logs_b": f"/jobs/{jobs.b_running.pk}/logs/?worker=0",
        "progress_a": f"/jobs/{jobs.a_running.pk}/progress/",
        "progress_b": f"/jobs/{jobs.b_running.pk}/progress/",
        "home_sorted": "/jobs/?ordering=-gpu_hours&state=active",
        "cancel_a": f"/jobs/{jobs.a_pending.pk}/cancel/",
        "queues": "/queues/",
        "cluster": "/cluster/",
        "utilization": "/utilization/",
        "utilization_week": "/utilization/?window=week",
        "teams": "/teams/",
        "team_a": "/teams/team-a/",
        "team_b": "/teams/team-b/",
        "tokens": "/tokens/",
    }[name]


# page -> expected status for alice, bob, carol, root (anonymous is always sent to sign in).
EXPECTED = {
    "home": (200, 200, 200, 200),
    "jobs": (200, 200, 200, 200),
    # `/` was the job list: its old links go on to /jobs/ with their query.
    "old_job_link": (302, 302, 302, 302),
    "home_filtered": (200, 200, 200, 200),
    "submit": (200, 200, 200, 200),
    "submit_preset": (200, 200, 200, 200),
    "job_a": (200, 200, 404, 200),
    "job_a_pending": (200, 200, 404, 200),
    "job_b": (404, 404, 200, 200),
    "logs_a": (200, 200, 404, 200),
    "logs_b": (404, 404, 200, 200),
    "progress_a": (200, 200, 404, 200),
    "progress_b": (404, 404, 200, 200),
    "home_sorted": (200, 200, 200, 200),
    # alice owns the job, bob administers its team; carol cannot see it.
    "cancel_a": (200, 200, 404, 200),
    "queues": (200, 200, 200, 200),
    "cluster": (200, 200, 200, 200),
    "utilization": (200, 200, 200, 200),
    "utilization_week": (200, 200, 200, 200),
    "teams": (200, 200, 200, 200),
    "team_a": (200, 200, 404, 200),
    "team_b": (404, 404, 200, 200),
    "tokens": (200, 200, 200, 200),
}


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_every_page_answers_each_persona_as_expected(
    page: str, clients: Any, world: Any, jobs: Any, samples: Any
) -> None:
    url = _url(page, world, jobs)
    for persona, want in zip(SIGNED_IN, EXPECTED[page], strict=True):
        response = clients[persona].get(url)
        assert response.status_code == want, (persona, url, response.status_code)
    anonymous = clients["anonymous"].get(url)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/accounts/login/")


def test_navigation_shows_the_users_teams_and_role(clients: Any, jobs: Any) -> None:
    bob = clients["bob"].get("/jobs/").content.decode()
    assert "team-a" in bob and ">admin<" in bob
    alice = clients["alice"].get("/jobs/").content.decode()
    assert "team-a" in alice and ">member<" in alice and "team-b" not in alice.split("<main")[0]
    root = clients["root"].get("/jobs/").content.decode()
    assert "site admin" in root


def test_sign_in_page_and_sign_out(client: Any, world: Any) -> None:
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b'for="id_username"' in page.content
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-pass-1"})
    assert response.status_code == 302
    assert client.get("/jobs/").status_code == 200
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/jobs/").status_code == 302


def test_job_list_shows_reason_position_and_estimated_start(clients: Any, jobs: Any) -> None:
    body = clients["alice"].get("/jobs/").content.decode()
    # The reason's word in the list, its sentence on hover (and on the job's page).
    assert (
        '<span class="reason-label" title="Waiting for 32 h100 GPUs as 4 × 8; 1 of 4 workers '
        'fit now; 8 GPUs free.">Resources</span>'
    ) in body
    assert "1 in team · 2 overall" in body
    assert "UTC</time> (in 1" in body  # estimated start about 12 minutes away
    assert "b-running" not in body  # team-b's job is not listed for alice


def test_job_list_filters(clients: Any, jobs: Any) -> None:
    pending = clients["alice"].get("/jobs/?state=pending").content.decode()
    assert "a-pending" in pending and "a-running" not in pending
    root = clients["root"].get("/jobs/?team=team-b").content.decode()
    assert "b-running" in root and "a-running" not in root
    assert "b-done" in clients["root"].get("/jobs/?state=finished").content.decode()


def test_job_list_states_in_any_case_and_a_wrong_one_said(clients: Any, jobs: Any) -> None:
    upper = clients["alice"].get("/jobs/?state=PENDING").content.decode()
    assert "a-pending" in upper and "a-running" not in upper
    assert 'id="filter-problem"' not in upper
    wrong = clients["alice"].get("/jobs/?state=pendin").content.decode()
    assert "Unknown state &#x27;pendin&#x27;: one of active, holding, finished" in wrong
    assert "a-pending" in wrong and "a-running" in wrong  # not filtered by it


def test_job_page_shows_timeline_placement_attempts_and_cancel(clients: Any, jobs: Any) -> None:
    body = clients["alice"].get(f"/jobs/{jobs.a_running.pk}/").content.decode()
    assert "PENDING → ADMITTED" in body and "ADMITTED → RUNNING" in body
    assert "h100-0" in body and 'id="job-attempts">1<' in body
    assert 'id="cancel-job"' in body and "hx-confirm" in body
    # carol may see her finished job but there is nothing to cancel.
    done = clients["carol"].get(f"/jobs/{jobs.b_done.pk}/").content.decode()
    assert 'id="cancel-job"' not in done


def test_cluster_page_marks_nodes_and_colours_cells(clients: Any, jobs: Any) -> None:
    body = clients["alice"].get("/cluster/").content.decode()
    assert 'data-node="h100-2" data-status="cordoned"' in body
    assert 'data-node="h100-3" data-status="NotReady"' in body
    # alice's job links from its cells; team-b's cells show the team but not the job.
    assert f'href="/jobs/{jobs.a_running.pk}/"' in body
    assert f"job #{jobs.b_running.pk}" not in body
    assert 'title="team-b"' in body


def test_queue_overview_shows_fair_share_allocated_borrowed_pending(
    clients: Any, jobs: Any
) -> None:
    body = clients["carol"].get("/queues/").content.decode()
    assert 'data-team="team-a"' in body and 'data-team="team-b"' in body
    assert "team-a on h100: 8 allocated, 0 of them borrowed, 32 pending" in body


def test_queue_overview_shows_each_teams_balance_owed_or_in_debt(
    clients: Any, jobs: Any, world: Any
) -> None:
    from django.utils import timezone

    from gpuqueue.models import ShareBalance

    now = timezone.now()
    ShareBalance.objects.create(team=world.team_a, flavor=world.h100, balance=-9000, updated_at=now)
    ShareBalance.objects.create(team=world.team_b, flavor=world.h100, balance=45000, updated_at=now)
    body = clients["carol"].get("/queues/").content.decode()
    assert '<td class="balance" data-balance="-2.5">2.5 GPU-h in debt</td>' in body
    assert '<td class="balance" data-balance="12.5">12.5 GPU-h owed</td>' in body


def test_utilization_page_shows_chart_and_idle_iron(clients: Any, samples: Any) -> None:
    body = clients["bob"].get("/utilization/?window=hour").content.decode()
    assert '<svg class="chart"' in body and 'id="idle-iron-total"' in body
    assert "GPU-hours" in body
