"""Input that once reached a 500, each answered with a clear 4xx that changes nothing."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import pytest

from gpuqueue.models import Job

JOB = {"team": "team-a", "flavor": "h100", "image": "ghcr.io/acme/train:1"}


def post(client: Any, body: str, **headers: Any) -> Any:
    return client.post("/api/v1/jobs/", body, content_type="application/json", **headers)


@pytest.mark.parametrize(
    "body",
    [
        {**JOB, "team": "team-a\u0000"},
        {**JOB, "env": {"A\u0000": "1"}},
        {**JOB, "command": ["python", "x\u0000"]},
    ],
    ids=["in a lookup", "in a key", "in a list"],
)
def test_a_nul_character_in_the_body_is_refused(api: Any, body: dict[str, Any]) -> None:
    response = post(api("alice"), json.dumps(body))
    assert response.status_code == 400
    assert "NUL" in response.json()["error"]["message"]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "path",
    ["/api/v1/teams/%00/", "/api/v1/jobs/?state=%00", "/?q=%00", "/jobs/?q=a%00b"],
)
def test_a_nul_character_in_a_path_or_filter_is_refused(api: Any, path: str) -> None:
    response = api("alice").get(path)
    assert response.status_code == 400


def test_json_nested_thousands_deep_is_refused_as_too_deep(api: Any) -> None:
    deep = "[" * 5000 + "]" * 5000
    body = json.dumps(JOB)[:-1] + ', "env": ' + deep + "}"
    response = post(api("alice"), body)
    assert response.status_code == 400
    assert "nested deeper" in response.json()["error"]["message"]
    assert not Job.objects.exists()


def test_a_body_of_megabytes_gets_the_documented_json_413(api: Any) -> None:
    body = json.dumps({**JOB, "env": {"BIG": "x" * 3_000_000}})
    response = post(api("alice"), body)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"
    assert not Job.objects.exists()


def test_a_chunked_body_without_a_length_is_refused_not_read_as_empty(api: Any) -> None:
    response = api("alice").generic(
        "POST",
        "/api/v1/jobs/",
        b"",
        content_type="application/json",
        HTTP_TRANSFER_ENCODING="chunked",
        CONTENT_LENGTH="",
    )
    assert response.status_code == 411
    assert not Job.objects.exists()


@pytest.mark.parametrize("cursor", ["cD1hYmM%3D", "cD05OTk5OTk5OTk5OTk5OTk5OTk5OTk5OQ%3D%3D"])
def test_a_tampered_cursor_is_not_found(api: Any, cursor: str) -> None:
    # "p=abc" and "p=99999999999999999999999999": not positions of an id.
    response = api("alice").get(f"/api/v1/jobs/?cursor={cursor}")
    assert response.status_code == 404


def test_a_checkpoint_token_with_a_5000_digit_id_is_refused(api: Any) -> None:
    for digits in ("9" * 5000, "9" * 19, "\u00b2"):
        token = f"gqj_{digits}_secret"
        response = api(None).post(
            "/api/v1/jobs/1/checkpointed/",
            {"location": "s3://x"},
            format="json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        assert response.status_code == 401, digits


def test_an_empty_idempotency_key_what_the_server_leaves_of_a_non_ascii_one_is_refused(
    api: Any,
) -> None:
    response = post(api("alice"), json.dumps(JOB), HTTP_IDEMPOTENCY_KEY="")
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["error"]["fields"]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "annotations",
    [
        {"gpuqueue.dev/sim-exit-code": "9" * 5000},
        {"gpuqueue.dev/sim-duration-seconds": "1000000000000"},
        {"gpuqueue.dev/sim-duration-seconds": "9" * 5000},
    ],
    ids=["exit code of 5000 digits", "duration past ten years", "duration of 5000 digits"],
)
def test_numbers_in_annotations_that_reach_arithmetic_are_refused_with_their_range(
    api: Any, annotations: dict[str, str]
) -> None:
    response = post(api("alice"), json.dumps({**JOB, "annotations": annotations}))
    assert response.status_code == 400
    assert " from 0 " in str(response.json()["error"]["fields"]["annotations"])
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/jobs/?%25s=1",
        "/api/v1/jobs/?state=%25d",
        "/api/v1/jobs/?state=100%25",
        "/api/v1/memberships/?%25(name)s=1",
        "/api/v1/audit/?x%25=1",
    ],
)
def test_a_percent_sign_in_a_filter_value_or_a_parameter_name_is_quoted_back_as_sent(
    api: Any, path: str
) -> None:
    client = api("root")
    client.raise_request_exception = False
    response = client.get(path)
    assert response.status_code == 400
    sent = urllib.parse.unquote(path.partition("?")[2].partition("=")[0])
    value = urllib.parse.unquote(path.partition("=")[2])
    fields = response.json()["error"]["fields"]
    quoted = sent if sent in fields else value
    assert repr(quoted) in str(fields)


@pytest.mark.parametrize("field", ["since", "until"])
@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"])
def test_usage_at_the_ends_of_the_calendar_with_an_offset_is_a_field_error(
    api: Any, world: Any, field: str, when: str
) -> None:
    from django.test import Client

    client = api("root")
    client.raise_request_exception = False
    response = client.get("/api/v1/usage/", {field: when})
    assert response.status_code == 400
    assert response.json()["error"]["fields"][field] == ["Not a representable date and time."]
    page = Client(raise_request_exception=False)
    page.force_login(world.root)
    assert page.get("/usage/", {field: when}).status_code == 422


@pytest.mark.parametrize("field", ["team", "flavor", "name", "image"])
def test_a_lone_surrogate_in_a_submission_is_refused(api: Any, field: str) -> None:
    client = api("alice")
    client.raise_request_exception = False
    response = post(client, json.dumps({**JOB, field: "\ud800"}))
    assert response.status_code == 400
    assert "surrogate" in response.json()["error"]["message"]
    assert not Job.objects.exists()


def test_a_lone_surrogate_in_a_membership_role_is_refused_with_a_readable_message(
    api: Any, world: Any
) -> None:
    from teams.models import Membership

    client = api("root")
    client.raise_request_exception = False
    before = list(Membership.objects.values_list("id", "role"))
    added = client.post(
        "/api/v1/memberships/",
        json.dumps({"team": "team-a", "user": "carol", "role": "\udc80admin"}),
        content_type="application/json",
    )
    assert added.status_code == 400
    assert "surrogate" in added.json()["error"]["message"]
    membership = Membership.objects.filter(team__slug="team-a").first()
    changed = client.patch(
        f"/api/v1/memberships/{membership.pk}/",
        json.dumps({"role": "\ud800"}),
        content_type="application/json",
    )
    assert changed.status_code == 400
    assert list(Membership.objects.values_list("id", "role")) == before


@pytest.mark.parametrize("ordering", ["name", "-user", "team"])
def test_a_cursor_whose_text_key_holds_a_lone_surrogate_is_not_found(
    api: Any, ordering: str
) -> None:
    from base64 import urlsafe_b64encode
    from datetime import UTC, datetime

    raw = [ordering, "\ud800", 1, datetime.now(UTC).isoformat(), False]
    cursor = urlsafe_b64encode(json.dumps(raw).encode()).decode()
    client = api("alice")
    client.raise_request_exception = False
    response = client.get("/api/v1/jobs/", {"ordering": ordering, "cursor": cursor})
    assert response.status_code == 404


@pytest.mark.parametrize("charset", ["unicode_escape", "utf-16", "no-such-codec"])
def test_a_charset_other_than_utf_8_is_refused_before_anything_is_decoded_with_it(
    api: Any, charset: str
) -> None:
    # unicode_escape would decode the query's `\ud800` to a lone surrogate, which reached the
    # database through the filter.
    client = api("alice")
    client.raise_request_exception = False
    response = client.generic(
        "GET", "/api/v1/jobs/?team=%5Cud800", content_type=f"text/plain; charset={charset}"
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_charset"
    utf8 = client.generic(
        "GET", "/api/v1/jobs/?team=team-a", content_type="text/plain; charset=UTF-8"
    )
    assert utf8.status_code == 200
