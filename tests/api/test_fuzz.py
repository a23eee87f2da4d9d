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
from gpuqueue.services.jobs import job_spec

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


# --- Every route, every form: the inputs that once reached a 500 --------------------------------
# Not random: each value below is sent to every API operation of the OpenAPI schema (in each
# query parameter it declares, as a parameter's name, in each field of its request body and in
# its path) and to every dashboard route (in its query and in every form field the dashboard
# has), so that a route added tomorrow is tried without anyone listing it here.
HOSTILE = [
    "x%(name)s %s 100%",  # an error text that quotes the input and is %-formatted again
    "team-\ud800",  # a lone surrogate: no UTF-8 text holds one
    "0001-01-01T00:00:00+05:00",  # the calendar's first day, shifted before year 1
    "9999-12-31T23:59:59-05:00",  # and its last, shifted past year 9999
]


def _api_operations() -> list[tuple[str, str, list[str], list[str]]]:
    """(method, path, query parameters, body fields) of every operation in the schema."""
    import django
    from drf_spectacular.generators import SchemaGenerator

    django.setup()
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    operations = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            query = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            ref = body.get("schema", {}).get("$ref", "")
            fields = list(components.get(ref.rpartition("/")[2], {}).get("properties", {}))
            operations.append((method.upper(), path, query, fields))
    return operations


API_OPERATIONS = _api_operations()


def _query(params: dict[str, str]) -> str:
    # surrogatepass: a lone surrogate goes out as the bytes a careless client would send.
    return urllib.parse.urlencode(
        {k.encode("utf-8", "surrogatepass"): v.encode("utf-8", "surrogatepass")
         for k, v in params.items()}
    )  # fmt: skip


@pytest.fixture
def objects(api: Any, world: Any) -> dict[str, str]:
    """An existing object for each kind of path parameter, by the path's first segment."""
    from gpuqueue.models import Node
    from teams.models import ApiToken, AuditEntry, Membership

    alice = api("alice")
    job = alice.post("/api/v1/jobs/", VALID, format="json").json()
    array = alice.post("/api/v1/arrays/", {**VALID, "array": "0-1"}, format="json").json()
    return {
        "jobs": str(job["id"]),
        "arrays": str(array["id"]),
        "teams": "team-a",
        "flavors": "h100",
        "memberships": str(Membership.objects.filter(team__slug="team-a").first().pk),
        "quotas": str(Quota.objects.first().pk),
        "nodes": Node.objects.first().name,
        "tokens": str(ApiToken.objects.first().pk),
        "audit": str(AuditEntry.objects.first().pk) if AuditEntry.objects.exists() else "1",
    }


def _fill(path: str, objects: dict[str, str], value: str | None = None) -> str:
    """The path with its {parameter} set to an existing object's (or to `value`, quoted)."""
    first = path.removeprefix("/api/v1/").split("/")[0]
    filled = objects.get(first, "1") if value is None else value
    quoted = urllib.parse.quote(filled.encode("utf-8", "surrogatepass"), safe="")
    head, _, rest = path.partition("{")
    return head + quoted + rest.partition("}")[2] if rest else path


@pytest.mark.parametrize(
    ("method", "path", "query", "fields"),
    API_OPERATIONS,
    ids=[f"{method} {path}" for method, path, _, _ in API_OPERATIONS],
)
def test_every_api_operation_answers_hostile_text_without_a_500(
    api: Any, objects: dict[str, str], method: str, path: str, query: list[str], fields: list[str]
) -> None:
    client = api("root")
    client.raise_request_exception = False
    base = {**VALID, "array": "0-1"} if "arrays" in path else dict(VALID)
    target = _fill(path, objects)
    for value in HOSTILE:
        # Each parameter alone, so that one refusal does not hide another (an unknown
        # `format` answers 404 before any filter is read); and the value as a name.
        for params in [*({name: value} for name in query), {value: "1"}]:
            before = rows()
            check(client.generic(method, f"{target}?{_query(params)}", "{}",
                                 content_type="application/json"), before)  # fmt: skip
        if "{" in path:
            before = rows()
            check(client.generic(method, _fill(path, objects, value)), before)
        for body in [{name: value for name in fields}, *({**base, name: value} for name in fields)]:
            before = rows()
            raw = json.dumps(body, ensure_ascii=True)  # \ud800 as an escape, as JSON allows
            check(client.generic(method, target, raw, content_type="application/json"), before)


def _dashboard_routes() -> list[tuple[str, str]]:
    """(name, path pattern) of every dashboard route and the sign-in pages."""
    import dashboard.urls

    routes = [(f"dashboard:{p.name}", str(p.pattern)) for p in dashboard.urls.urlpatterns]
    return [*routes, ("login", "accounts/login/"), ("logout", "accounts/logout/")]


def _form_fields() -> list[str]:
    """Every field of every form the dashboard posts (the submit form with the fields it adds,
    the quota form under its per-flavor prefix too), and the sign-in form's."""
    from django import forms
    from django.contrib.auth.forms import AuthenticationForm

    import dashboard.forms
    from dashboard import array_and_dependency_fields

    classes = [
        value
        for value in vars(dashboard.forms).values()
        if isinstance(value, type) and issubclass(value, forms.BaseForm) and value.base_fields
    ]
    names = {name for cls in [*classes, AuthenticationForm] for name in cls.base_fields}
    names |= set(array_and_dependency_fields.FIELDS)
    names |= {f"q1-{name}" for name in dashboard.forms.QuotaForm.base_fields}
    return sorted(names | {"indices", "state", "action"})  # the array page's cancel form


DASHBOARD_ROUTES = _dashboard_routes()
ALL_FORM_FIELDS = _form_fields()
# The query parameters the pages read (their filters and sorting).
PAGE_PARAMETERS = ["q", "state", "team", "flavor", "user", "since", "until", "by", "sort",
                   "order", "window", "page", "cursor", "preset", "mine"]  # fmt: skip


def _dashboard_path(pattern: str, objects: dict[str, str], world: Any) -> tuple[str, int]:
    from gpuqueue.models import Flavor
    from teams.models import ApiToken, Membership

    kinds = {
        "job_id": objects["jobs"],
        "array_id": objects["arrays"],
        "slug": "team-a",
        "flavor": "h100",
        "membership_id": str(Membership.objects.filter(team__slug="team-a").first().pk),
        "token_id": str(ApiToken.objects.filter(user=world.root).first().pk),
    }
    path = "/" + pattern
    for name, value in kinds.items():
        path = path.replace(f"<int:{name}>", value).replace(f"<slug:{name}>", value)
    assert "<" not in path, f"a dashboard route with a parameter this test does not know: {path}"
    # The quota form's fields carry the flavor's id as their prefix.
    return path, Flavor.objects.get(name="h100").pk


@pytest.mark.parametrize(
    ("name", "pattern"), DASHBOARD_ROUTES, ids=[name for name, _ in DASHBOARD_ROUTES]
)
def test_every_dashboard_route_and_form_answers_hostile_text_without_a_500(
    world: Any, objects: dict[str, str], name: str, pattern: str
) -> None:
    from django.test import Client

    client = Client(raise_request_exception=False)
    client.force_login(world.root)
    path, h100 = _dashboard_path(pattern, objects, world)
    fields = [f.replace("q1-", f"q{h100}-") for f in ALL_FORM_FIELDS]
    form = "application/x-www-form-urlencoded"
    for value in HOSTILE:
        for params in [*({name: value} for name in PAGE_PARAMETERS), {value: "1"}]:
            before = rows()
            check(client.get(f"{path}?{_query(params)}"), before)
        before = rows()
        everything = _query({name: value for name in PAGE_PARAMETERS})
        check(client.get(f"{path}?{everything}", HTTP_HX_REQUEST="true"), before)
        before = rows()
        check(client.post(path, _query({f: value for f in fields}), content_type=form), before)
        if name == "dashboard:submit":
            for field in fields:
                body = _query({**VALID, field: value})
                before = rows()
                check(client.post(path, body, content_type=form), before)
