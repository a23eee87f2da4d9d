"""Input that once reached a 500, each answered with a clear 4xx that changes nothing."""

from __future__ import annotations

import json
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
