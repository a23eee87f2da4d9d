"""The cancel page without JavaScript: a job that has ended is not offered for cancelling, and
a cancel that comes too late says what became of the job."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.django_db


def test_the_cancel_page_of_a_finished_job_offers_no_cancel(clients: Any, jobs: Any) -> None:
    response = clients["carol"].get(f"/jobs/{jobs.b_done.pk}/cancel/")
    body = response.content.decode()
    assert f"Job {jobs.b_done.pk} is already cancelled." in body
    assert "Yes, cancel it" not in body and '<form method="post">' not in body


def test_the_cancel_page_of_a_running_job_offers_to_cancel(clients: Any, jobs: Any) -> None:
    body = clients["alice"].get(f"/jobs/{jobs.a_running.pk}/cancel/").content.decode()
    assert "Yes, cancel it" in body


def test_cancelling_a_job_that_ended_meanwhile_says_so(clients: Any, jobs: Any) -> None:
    response = clients["carol"].post(f"/jobs/{jobs.b_done.pk}/cancel/")
    assert response.status_code == 409
    assert f"Job {jobs.b_done.pk} is already cancelled." in response.content.decode()
