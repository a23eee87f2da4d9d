"""The lists that show why jobs wait read every job's standing with the jobs themselves: as many
queries for five waiting jobs as for one."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.standings import show

REASON = {"code": "no_capacity", "numbers": {"flavor": "h100", "free": 0}, "job_ids": []}


def _queries(client: Any, path: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path).status_code == 200
    return len(queries.captured_queries)


def test_the_api_and_the_job_list_read_standings_without_a_query_per_job(
    api: Any, world: Any, submit: Any
) -> None:
    page = Client()
    page.force_login(world.alice)
    token_client = api("alice")
    show(submit().pk, reason=REASON, queue_position=1, cluster_position=1)
    _queries(token_client, "/api/v1/jobs/")  # caches (token, teams) filled by the first
    one = (_queries(token_client, "/api/v1/jobs/"), _queries(page, "/jobs/"))
    for place in range(2, 6):
        show(submit().pk, reason=REASON, queue_position=place, cluster_position=place)
    body = token_client.get("/api/v1/jobs/").json()
    assert sorted(j["queue_position"] for j in body["results"]) == [1, 2, 3, 4, 5]
    assert (_queries(token_client, "/api/v1/jobs/"), _queries(page, "/jobs/")) == one
