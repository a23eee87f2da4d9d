"""Every form field is bounded before it is read: 2 MiB in any field of any form the dashboard
posts is refused by the body's size (400) before a field reads it, and a field's text over its
own bound but within the body's is a field error (422) before it is parsed; neither writes
anything. (How long a refusal takes is measured by hand, not asserted here.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from dashboard import array_and_dependency_fields
from dashboard.forms import (
    COMMAND_MAX_CHARS,
    LINE_MAX_CHARS,
    TEXT_MAX_CHARS,
    MemberForm,
    QuotaForm,
    RoleForm,
    SubmitForm,
    TokenForm,
)

TWO_MIB = 2 * 1024 * 1024
VALID_JOB = {"team": "team-a", "flavor": "h100", "image": "ghcr.io/acme/train:1", "workers": "1"}
# Words a shell splits, so that a field that parses does the work it would do in earnest.
WORDS = "python 'a b' \"c\" "


def rows() -> dict[str, int]:
    from axes.models import AccessAttempt

    from gpuqueue.models import Job, JobEvent, Quota
    from teams.models import ApiToken, AuditEntry, Membership

    models = [Job, JobEvent, Quota, Membership, ApiToken, AuditEntry, AccessAttempt]
    return {model.__name__: model.objects.count() for model in models}


def quota_values() -> list[tuple[Any, ...]]:
    from gpuqueue.models import Quota

    return list(Quota.objects.order_by("pk").values_list("guarantee", "limit", "weight"))


def _membership_id(world: Any) -> int:
    from teams.models import Membership

    return int(Membership.objects.get(user=world.alice, team=world.team_a).pk)


def _array_path(world: Any) -> str:
    from gpuqueue.services.jobs.array_spec import parse
    from gpuqueue.services.jobs.arrays import submit_array
    from gpuqueue.services.jobs.dependencies import Dependencies

    fields = {"name": "sweep", "image": "ghcr.io/acme/train:1"}
    made = submit_array(world.alice, world.team_a, world.h100, fields, parse("0-1"), Dependencies())
    return f"/arrays/{made.array.pk}/cancel/"


# (form, path, the fields it posts, what else a valid post carries): every form the dashboard
# has. The submit form's fields include the array and dependency fields it adds.
FORMS: dict[str, tuple[Callable[[Any], str], list[str], dict[str, str]]] = {
    "submit": (
        lambda world: "/jobs/new/",
        [*SubmitForm.base_fields, *array_and_dependency_fields.FIELDS],
        VALID_JOB,
    ),
    "quota": (
        lambda world: "/teams/team-a/quotas/h100/",
        [f"q{{h100}}-{name}" for name in QuotaForm.base_fields],
        {},
    ),
    "member add": (lambda world: "/teams/team-a/members/", list(MemberForm.base_fields), {}),
    "member role": (
        lambda world: f"/teams/team-a/members/{_membership_id(world)}/",
        [*RoleForm.base_fields, "action"],
        {},
    ),
    "token": (lambda world: "/tokens/", list(TokenForm.base_fields), {}),
    "array cancel": (_array_path, ["indices", "state"], {}),
    "sign-in": (lambda world: "/accounts/login/", ["username", "password"], {}),
    "admin sign-in": (lambda world: "/admin/login/", ["username", "password"], {}),
}
CASES = [(form, field) for form, (_, fields, _) in FORMS.items() for field in fields]


@pytest.fixture
def signed_in(world: Any, nodes: Any) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(world.root)
    return client


@pytest.mark.parametrize(("form", "field"), CASES, ids=[f"{f}: {n}" for f, n in CASES])
def test_two_mib_in_any_form_field_is_refused_by_the_body_size_and_writes_nothing(
    world: Any, signed_in: Any, form: str, field: str
) -> None:
    make_path, _, valid = FORMS[form]
    path = make_path(world)
    field = field.replace("{h100}", str(world.h100.pk))
    before, quotas = rows(), quota_values()
    client = Client(raise_request_exception=False) if "sign-in" in form else signed_in
    text = (WORDS * (TWO_MIB // len(WORDS) + 1))[:TWO_MIB]
    response = client.post(path, {**valid, field: text})
    assert response.status_code == 400
    assert rows() == before
    assert quota_values() == quotas


SUBMIT_TEXT_FIELDS = ["env", "labels", "annotations", "volumes", "image_pull_secrets"]
SUBMIT_LINE_FIELDS = ["name", "image", "workers", "priority", "memory_mib", "service_account"]


@pytest.mark.parametrize(
    ("field", "most"),
    [("command", COMMAND_MAX_CHARS)]
    + [(f, TEXT_MAX_CHARS) for f in SUBMIT_TEXT_FIELDS]
    + [(f, LINE_MAX_CHARS) for f in SUBMIT_LINE_FIELDS],
)
def test_a_submit_field_over_its_bound_is_a_field_error_before_it_is_read(
    signed_in: Any, field: str, most: int
) -> None:
    before = rows()
    text = (WORDS * (most // len(WORDS) + 2))[:most] + "x"  # no space at the end to strip
    response = signed_in.post("/jobs/new/", {**VALID_JOB, field: text})
    assert response.status_code == 422
    assert f"The text is {most + 1} characters long; at most {most}." in response.text
    assert rows() == before


def test_a_quota_number_over_its_bound_is_a_field_error(world: Any, signed_in: Any) -> None:
    before, quotas = rows(), quota_values()
    prefix = f"q{world.h100.pk}-"
    fields = {f"{prefix}guarantee": "1" * (LINE_MAX_CHARS + 1), f"{prefix}limit": "8"}
    response = signed_in.post(
        "/teams/team-a/quotas/h100/", {**fields, f"{prefix}weight": "1"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 422
    assert rows() == before
    assert quota_values() == quotas


def test_the_curl_preview_reads_no_field_past_its_bound(signed_in: Any) -> None:
    # A GET: its query is bounded by the web server, not by the body limit.
    before = rows()
    command = (WORDS * (COMMAND_MAX_CHARS // len(WORDS) + 2))[:COMMAND_MAX_CHARS] + "x"
    response = signed_in.get("/jobs/new/curl/", {**VALID_JOB, "command": command})
    assert response.status_code == 200
    assert f"at most {COMMAND_MAX_CHARS}" in response.text
    assert rows() == before
