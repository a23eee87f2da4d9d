"""Hypothesis fuzzing of what schemathesis does not reach: arbitrary JSON bodies (any value, any
nesting, NUL and lone surrogates included), query parameters, headers and path segments of the
API, and the dashboard's filters and forms. Whatever arrives, the answer is never a 5xx, and an
answer of 4xx writes no row."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.forms import SubmitForm
from gpuqueue.models import Job, JobEvent, Quota
from gpuqueue.services import job_spec

EXAMPLES = 60
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)

text = st.text(max_size=40)
scalars = st.none() | st.booleans() | st.integers() | st.floats() | text
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)
VALID = {"team": "team-a", "flavor": "h100", "image": "ghcr.io/acme/train:1"}
FIELDS = list(job_spec.FIELDS)  # every field a submission takes, the workload spec included
# A valid job with some fields replaced by anything, or any JSON at all.
bodies = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4).map(
        lambda changes: {**VALID, **changes}
    ),
    json_values,
)
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=60)


def rows() -> tuple[int, int, int]:
    return Job.objects.count(), JobEvent.objects.count(), Quota.objects.count()


def check(response: Any, before: tuple[int, int, int]) -> None:
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        assert rows() == before


@pytest.fixture
def client(api: Any) -> Any:
    return api("alice")


@FUZZ
@given(body=bodies, key=st.none() | header_text)
def test_any_job_body_and_idempotency_key(client: Any, body: Any, key: str | None) -> None:
    raw = json.dumps(body, allow_nan=True)  # NaN and Infinity too, as some clients send
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    before = rows()
    check(client.post("/api/v1/jobs/", raw, content_type="application/json", **headers), before)


@FUZZ
@given(raw=st.binary(max_size=200))
def test_any_bytes_as_a_json_body(client: Any, raw: bytes) -> None:
    before = rows()
    check(client.post("/api/v1/jobs/", raw, content_type="application/json"), before)


LISTS = ["/api/v1/jobs/", "/api/v1/utilization/history/", "/api/v1/audit/", "/api/v1/teams/"]
PAGES = ["/", "/queues/", "/cluster/", "/utilization/", "/teams/", "/tokens/"]


@FUZZ
@given(
    path=st.sampled_from(LISTS + PAGES),
    params=st.dictionaries(st.sampled_from(["state", "team", "q", "since", "cursor",
                                            "page_size", "window", "flavor", "ordering"]) | text,
                           text, max_size=3),
)  # fmt: skip
def test_any_query_parameters(api: Any, world: Any, path: str, params: dict[str, str]) -> None:
    from django.test import Client

    client = api("alice") if path.startswith("/api/") else Client()
    if not path.startswith("/api/"):
        client.force_login(world.alice)
    before = rows()
    check(client.get(path + "?" + urllib.parse.urlencode(params)), before)


@FUZZ
@given(
    prefix=st.sampled_from(
        ["/api/v1/jobs/", "/api/v1/teams/", "/api/v1/flavors/", "/jobs/", "/teams/"]
    ),
    segment=st.text(min_size=1, max_size=30),
    method=st.sampled_from(["GET", "POST", "PATCH", "DELETE"]),
)
def test_any_path_segment(api: Any, prefix: str, segment: str, method: str) -> None:
    path = prefix + urllib.parse.quote(segment.encode("utf-8", "surrogatepass"), safe="") + "/"
    before = rows()
    check(api("root").generic(method, path, "{}", content_type="application/json"), before)


@FUZZ
@given(authorization=header_text)
def test_any_authorization_header(api: Any, authorization: str) -> None:
    before = rows()
    response = api(None).get("/api/v1/jobs/", HTTP_AUTHORIZATION=authorization)
    check(response, before)
    assert response.status_code in (200, 401, 403, 429)


FORM_FIELDS = list(SubmitForm.base_fields)  # every field of the submit form


@FUZZ
@given(form=st.dictionaries(st.sampled_from(FORM_FIELDS), text, max_size=8))
def test_any_submit_form(world: Any, nodes: Any, form: dict[str, str]) -> None:
    from django.test import Client

    client = Client()
    client.force_login(world.alice)
    before = rows()
    check(client.post("/jobs/new/", {**VALID, **form}), before)


@FUZZ
@given(form=st.dictionaries(st.sampled_from(["guarantee", "limit", "weight"]), text, max_size=3))
def test_any_quota_form(world: Any, form: dict[str, str]) -> None:
    from django.test import Client

    client = Client()
    client.force_login(world.root)
    before = rows()
    quotas = list(Quota.objects.values_list("team_id", "flavor_id", "guarantee", "limit"))
    response = client.post("/teams/team-a/quotas/h100/", form)
    assert response.status_code < 500
    if response.status_code >= 400:
        assert rows() == before
        assert list(Quota.objects.values_list("team_id", "flavor_id", "guarantee", "limit")) == (
            quotas
        )
