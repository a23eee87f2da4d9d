"""An htmx request after the session ended answers 401 with where to sign in (and come back to
the page, not the partial); a page request still gets the ordinary redirect."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db


def test_a_poll_without_a_session_answers_401_with_sign_in_back_to_the_page(
    clients: Any, jobs: Any
) -> None:
    response = clients["anonymous"].get(
        f"/jobs/{jobs.a_running.pk}/progress/",
        headers={
            "HX-Request": "true",
            "HX-Current-URL": f"http://testserver/jobs/{jobs.a_running.pk}/?tab=events",
        },
    )
    assert response.status_code == 401
    assert b"<form" not in response.content  # nothing that htmx could swap in as a page
    assert response["X-Sign-In"] == (
        f"/accounts/login/?next=%2Fjobs%2F{jobs.a_running.pk}%2F%3Ftab%3Devents"
    )


def test_a_submit_without_a_session_answers_401_and_writes_nothing(
    clients: Any, nodes: Any
) -> None:
    from gpuqueue.models import Job

    response = clients["anonymous"].post(
        "/jobs/new/",
        {"team": "team-a", "flavor": "h100", "image": "x:1"},
        headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/jobs/new/"},
    )
    assert response.status_code == 401
    assert response["X-Sign-In"] == "/accounts/login/?next=%2Fjobs%2Fnew%2F"
    assert not Job.objects.exists()


def test_another_sites_page_is_not_where_sign_in_returns(clients: Any) -> None:
    response = clients["anonymous"].get(
        "/", headers={"HX-Request": "true", "HX-Current-URL": "https://evil.example/steal"}
    )
    assert response["X-Sign-In"] == "/accounts/login/?next=%2F"


def test_a_page_request_without_a_session_is_still_redirected(clients: Any) -> None:
    response = clients["anonymous"].get("/queues/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/queues/"
