"""What a person types into the submit form's numbers: the browser must hand the text to the
server (a number box empties itself when it holds letters, and the job got the default), and
durations read as in the CLI and the API."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gpuqueue.models import Job

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
FORM = {"team": "team-a", "flavor": "h100", "name": "typed", "image": "ghcr.io/acme/train:1"}
INTEGERS = ("workers", "gpus_per_worker", "priority", "cpu_millicores", "memory_mib")


def input_tag(html: str, name: str) -> str:
    match = re.search(rf'<input[^>]*name="{name}"[^>]*>', html)
    assert match, name
    return match.group(0)


def test_integer_boxes_are_text_boxes_so_letters_reach_the_server(clients: Any) -> None:
    html = clients["alice"].get("/jobs/new/").content.decode()
    html += clients["alice"].get("/tokens/").content.decode()
    for name in (*INTEGERS, "expires_in_days"):
        tag = input_tag(html, name)
        assert 'type="text"' in tag and 'inputmode="numeric"' in tag, tag


def test_letters_in_a_tokens_days_are_refused_and_no_token_is_made(
    clients: Any, world: Any
) -> None:
    from teams.models import ApiToken

    response = clients["alice"].post("/tokens/", {"name": "n", "expires_in_days": "ten"})
    assert "Enter a whole number." in response.content.decode()
    assert not ApiToken.objects.filter(user=world.alice).exists()


@pytest.mark.parametrize("field", ["workers", "priority"])
def test_letters_in_an_integer_are_refused_at_the_field(
    clients: Any, nodes: Any, field: str
) -> None:
    response = clients["alice"].post("/jobs/new/", {**FORM, field: "abc"}, **HX)
    assert response.status_code == 422
    body = response.content.decode()
    assert f'<p class="field-error" id="error-{field}">Must be an integer.</p>' in body
    assert not Job.objects.exists()


def test_durations_are_read_as_people_write_them(clients: Any, nodes: Any) -> None:
    typed = {
        "max_runtime_seconds": "2h",
        "expected_runtime_seconds": "1:30:00",
        "checkpoint_grace_seconds": "90s",
    }
    response = clients["alice"].post("/jobs/new/", {**FORM, **typed}, **HX)
    assert response.status_code == 204, response.content.decode()[:2000]
    job = Job.objects.get()
    assert (job.max_runtime_seconds, job.expected_runtime_seconds) == (7200, 5400)
    assert job.checkpoint_grace_seconds == 90


def test_a_bad_duration_is_refused_at_the_field_saying_how_to_write_one(
    clients: Any, nodes: Any
) -> None:
    response = clients["alice"].post("/jobs/new/", {**FORM, "max_runtime_seconds": "soon"}, **HX)
    assert response.status_code == 422
    body = response.content.decode()
    assert 'id="error-max_runtime_seconds"' in body
    assert "is no duration; write seconds (5400) or a duration such as 45s, 90m, 2h" in body
    assert not Job.objects.exists()
