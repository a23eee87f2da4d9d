"""How much a submission asks of PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext


@pytest.mark.django_db(transaction=True)
def test_an_api_submission_makes_five_queries_and_one_commit(api: Any, job_body: Any) -> None:
    """Token, earlier submission, team, flavor, and one statement writing the job and its event.
    (A regression guard: each ORM query here cost 0.5 to 1 ms of CPU; see gpuqueue.sql_rows.)"""
    client = api("alice")
    assert client.post("/api/v1/jobs/", job_body, format="json").status_code == 201  # warm caches
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/v1/jobs/", job_body, format="json", HTTP_IDEMPOTENCY_KEY="q-1")
    assert response.status_code == 201
    statements = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    assert statements == ["SELECT", "SELECT", "SELECT", "SELECT", "WITH"], statements
