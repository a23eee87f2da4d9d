"""Error pages that help: a way back, what happened, and nothing from another team."""

from __future__ import annotations

from typing import Any

from django.test import Client, RequestFactory
from django.views.defaults import server_error


def test_a_missing_page_is_styled_and_leads_back(clients: Any) -> None:
    response = clients["alice"].get("/jobs/999999/")
    assert response.status_code == 404
    page = response.content.decode()
    assert "<h1>Not found</h1>" in page and "/jobs/999999/" in page
    assert 'href="/">Your jobs</a>' in page
    assert "gpuqueue.css" in page  # the dashboard's look, with its navigation
    assert 'id="main"' in page


def test_a_missing_page_offers_sign_in_to_someone_signed_out(clients: Any) -> None:
    page = clients["anonymous"].get("/no-such-page/").content.decode()
    assert "/accounts/login/?next=/no-such-page/" in page


def test_a_form_posted_without_its_token_says_nothing_changed(world: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.alice)
    response = client.post("/jobs/new/", {"flavor": "h100", "image": "x"})
    assert response.status_code == 403
    page = response.content.decode()
    assert "The form expired" in page and "Nothing was changed" in page
    assert world.alice.jobs.count() == 0


def test_a_server_error_page_needs_neither_request_context_nor_database() -> None:
    request = RequestFactory().get("/queues/")
    response = server_error(request)
    assert response.status_code == 500
    page = response.content.decode()
    assert "Something went wrong on our side" in page and 'href="/">Your jobs</a>' in page


def test_an_unknown_api_path_answers_json_not_the_page(clients: Any) -> None:
    response = clients["alice"].get("/api/v1/no-such-thing/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    assert response.json()["error"]["code"] == "not_found"
