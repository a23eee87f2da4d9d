"""Writes from the dashboard: submit, cancel, quotas, members, tokens; and the htmx protocol
(partials, 286 to stop polling, 422 for a form with errors, counters out of band)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, Quota
from teams.models import ApiToken, AuditEntry, Membership

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


def _job_form(**overrides: Any) -> dict[str, str]:
    form = {
        "team": "team-a",
        "flavor": "h100",
        "name": "sweep",
        "image": "ghcr.io/acme/train:1",
        "command": "python train.py --lr '1e-4'",
        "workers": "2",
        "gpus_per_worker": "4",
        "priority": "0",
        "preemptible": "on",
        "env": "SEED=1\n",
        "annotations": "",
    }
    form.update(overrides)
    return form


def test_submit_creates_the_job_and_opens_its_page(clients: Any, nodes: Any) -> None:
    response = clients["alice"].post("/jobs/new/", _job_form())
    job = Job.objects.get(name="sweep")
    assert response.status_code == 303 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.workers, job.gpus_per_worker, job.state) == (2, 4, JobState.PENDING)
    assert job.command == ["python", "train.py", "--lr", "1e-4"] and job.env == {"SEED": "1"}
    htmx = clients["alice"].post("/jobs/new/", _job_form(name="sweep-2"), **HX)
    assert htmx.status_code == 204 and htmx["HX-Redirect"].startswith("/jobs/")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("workers", "0", "Ensure this value is greater than or equal to 1."),
        ("workers", "two", "Must be an integer."),
        ("image", "", "This field is required."),
        ("gpus_per_worker", "16", "the largest node of that flavor has 8"),
        ("flavor", "a100", "Unknown flavor a100."),
        ("team", "team-b", "Unknown team team-b."),
        ("env", "NOEQUALS", "Line 1: write KEY=value."),
        ("command", "python 'unclosed", "Cannot split into words"),
    ],
)
def test_a_refused_submission_rerenders_with_422_and_the_apis_message(
    clients: Any, nodes: Any, field: str, value: str, message: str
) -> None:
    response = clients["alice"].post("/jobs/new/", _job_form(**{field: value}), **HX)
    assert response.status_code == 422
    body = response.content.decode()
    assert f'id="error-{field}"' in body and message in body
    assert 'id="submit-form"' in body and "<html" not in body  # the partial, not the page
    assert not Job.objects.exists()


def test_the_form_and_the_api_refuse_the_same_submission_alike(clients: Any, nodes: Any) -> None:
    from rest_framework.test import APIClient

    from teams.models import Team  # noqa: F401 - the world fixture made the teams

    api = APIClient()
    api.force_authenticate(Job._meta.get_field("user").related_model.objects.get(username="alice"))
    body = {"team": "team-a", "flavor": "h100", "image": "ghcr.io/acme/train:1", "workers": 0}
    api_error = api.post("/api/v1/jobs/", body, format="json").json()
    page = clients["alice"].post("/jobs/new/", _job_form(workers="0")).content.decode()
    assert api_error["error"]["fields"]["workers"][0] in page


def test_presets_and_the_curl_to_copy(clients: Any, nodes: Any) -> None:
    body = clients["alice"].get("/jobs/new/?preset=distributed").content.decode()
    assert 'value="4"' in body and "torchrun --nnodes 4" in body
    assert "curl -X POST" in body and "/api/v1/jobs/" in body and "&quot;workers&quot;: 4" in body
    curl = clients["alice"].get("/jobs/new/curl/", {**_job_form(workers="3")}, **HX)
    assert curl.status_code == 200 and "&quot;workers&quot;: 3" in curl.content.decode()
    assert 'id="curl-refused"' not in curl.content.decode()


def test_the_curl_shows_what_was_typed_and_marks_what_the_api_would_refuse(
    clients: Any, nodes: Any
) -> None:
    before = Job.objects.count()
    typed = {**_job_form(workers="0"), "gpus_per_worker": "many"}
    page = clients["alice"].get("/jobs/new/curl/", typed, **HX).content.decode()
    assert (
        "&quot;workers&quot;: 0" in page and "&quot;gpus_per_worker&quot;: &quot;many&quot;" in page
    )
    refused = page[page.index('id="curl-refused"') :]
    assert "would refuse" in refused and "Workers" in refused and "GPUs per worker" in refused
    assert Job.objects.count() == before


def test_cancel_by_owner_team_admin_and_refusals(clients: Any, jobs: Any) -> None:
    assert clients["carol"].post(f"/jobs/{jobs.a_pending.pk}/cancel/").status_code == 404
    response = clients["alice"].post(f"/jobs/{jobs.a_pending.pk}/cancel/", **HX)
    assert response.status_code == 204 and response["HX-Redirect"] == f"/jobs/{jobs.a_pending.pk}/"
    assert Job.objects.get(pk=jobs.a_pending.pk).state == JobState.CANCELLED
    again = clients["alice"].post(f"/jobs/{jobs.a_pending.pk}/cancel/")
    assert again.status_code == 409
    # bob administers team-a and may cancel alice's running job.
    assert clients["bob"].post(f"/jobs/{jobs.a_running.pk}/cancel/").status_code == 303
    assert Job.objects.get(pk=jobs.a_running.pk).state == JobState.CANCELLED


def test_a_member_may_not_cancel_a_teammates_job(clients: Any, world: Any, submit: Any) -> None:
    bobs = submit(world.bob, name="bobs")
    assert clients["alice"].post(f"/jobs/{bobs.pk}/cancel/").status_code == 403
    assert Job.objects.get(pk=bobs.pk).state == JobState.PENDING


def test_live_regions_poll_until_nothing_can_change(clients: Any, jobs: Any) -> None:
    live = clients["alice"].get(f"/jobs/{jobs.a_running.pk}/", **HX)
    assert live.status_code == 200 and 'hx-trigger="every 2s"' in live.content.decode()
    assert 'id="job-counters" class="counters" hx-swap-oob="true"' in live.content.decode()
    final = clients["carol"].get(f"/jobs/{jobs.b_done.pk}/", **HX)
    assert final.status_code == 286 and "hx-trigger" not in final.content.decode()
    assert clients["root"].get("/jobs/?state=finished", **HX).status_code == 286
    assert clients["root"].get("/jobs/?state=active", **HX).status_code == 200
    for url in ("/queues/", "/cluster/", "/utilization/"):
        partial = clients["alice"].get(url, **HX)
        assert partial.status_code == 200 and "<html" not in partial.content.decode()


def test_root_edits_a_quota_inline_and_sees_the_audit_entry(
    clients: Any, world: Any, nodes: Any
) -> None:
    response = clients["root"].post(
        "/teams/team-b/quotas/h100/",
        {
            f"q{world.h100.pk}-guarantee": "12",
            f"q{world.h100.pk}-limit": "24",
            f"q{world.h100.pk}-weight": "2",
        },
        **HX,
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "Saved." in body and 'id="audit" hx-swap-oob="true"' in body
    assert "quota.update <strong>team-b/h100</strong>" in body and "guarantee=12" in body
    quota = Quota.objects.get(team=world.team_b, flavor=world.h100)
    assert (quota.guarantee, quota.limit, quota.weight) == (12, 24, 2.0)
    assert AuditEntry.objects.filter(action="quota.update", actor=world.root).count() == 1


def test_a_refused_quota_edit_answers_422_with_the_numbers(
    clients: Any, world: Any, nodes: Any
) -> None:
    prefix = f"q{world.h100.pk}"
    bad = clients["root"].post(
        "/teams/team-a/quotas/h100/",
        {f"{prefix}-guarantee": "9", f"{prefix}-limit": "4", f"{prefix}-weight": "1"},
        **HX,
    )
    assert bad.status_code == 422
    assert "The guarantee (9) may not exceed the limit (4)." in bad.content.decode()
    over = clients["root"].post(
        "/teams/team-a/quotas/h100/",
        {f"{prefix}-guarantee": "40", f"{prefix}-limit": "40", f"{prefix}-weight": "1"},
        **HX,
    )
    assert over.status_code == 422 and "against a capacity of" in over.content.decode()
    # The way out is named as the form names it.
    assert "allow guarantees beyond capacity" in over.content.decode().split("against")[1]
    assert Quota.objects.get(team=world.team_a, flavor=world.h100).guarantee == 8


def test_only_site_admins_edit_quotas(clients: Any, world: Any) -> None:
    data = {
        f"q{world.h100.pk}-guarantee": "1",
        f"q{world.h100.pk}-limit": "2",
        f"q{world.h100.pk}-weight": "1",
    }
    assert clients["bob"].post("/teams/team-a/quotas/h100/", data).status_code == 403
    assert clients["alice"].post("/teams/team-a/quotas/h100/", data).status_code == 403
    assert clients["carol"].post("/teams/team-a/quotas/h100/", data).status_code == 404
    assert 'id="quota-h100"' not in clients["bob"].get("/teams/team-a/").content.decode()
    assert 'id="quota-h100"' in clients["root"].get("/teams/team-a/").content.decode()


def test_team_admin_manages_members_and_roles(clients: Any, world: Any) -> None:
    assert (
        clients["bob"]
        .post("/teams/team-a/members/", {"username": "carol", "role": "member"})
        .status_code
        == 303
    )
    carol = Membership.objects.get(team=world.team_a, user=world.carol)
    assert (
        clients["bob"].post(f"/teams/team-a/members/{carol.pk}/", {"role": "admin"}).status_code
        == 303
    )
    assert Membership.objects.get(pk=carol.pk).role == "admin"
    assert (
        clients["bob"].post(f"/teams/team-a/members/{carol.pk}/", {"action": "remove"}).status_code
        == 303
    )
    assert not Membership.objects.filter(pk=carol.pk).exists()
    unknown = clients["bob"].post("/teams/team-a/members/", {"username": "zed", "role": "member"})
    assert unknown.status_code == 422 and "No user has this name." in unknown.content.decode()
    alice = Membership.objects.get(team=world.team_a, user=world.alice)
    assert (
        clients["alice"].post(f"/teams/team-a/members/{alice.pk}/", {"role": "admin"}).status_code
        == 403
    )
    page = clients["bob"].get("/teams/team-a/").content.decode()
    assert "membership.delete" in page  # the audit trail, shown to team admins
    assert "membership.delete" not in clients["alice"].get("/teams/team-a/").content.decode()


def test_the_last_admin_stays(clients: Any, world: Any) -> None:
    bob = Membership.objects.get(team=world.team_a, user=world.bob)
    response = clients["bob"].post(f"/teams/team-a/members/{bob.pk}/", {"role": "member"})
    assert response.status_code == 422 and "last admin" in response.content.decode()


def test_tokens_are_shown_once_and_revoked(clients: Any, world: Any) -> None:
    created = clients["alice"].post("/tokens/", {"name": "nightly"})
    body = created.content.decode()
    assert created.status_code == 200 and 'id="token-secret">gq_' in body
    token = ApiToken.objects.get(user=world.alice)
    listing = clients["alice"].get("/tokens/").content.decode()
    assert "nightly" in listing and "token-secret" not in listing
    assert clients["carol"].post(f"/tokens/{token.pk}/revoke/").status_code == 404
    assert f'data-token="{token.prefix}"' not in clients["carol"].get("/tokens/").content.decode()
    assert clients["alice"].post(f"/tokens/{token.pk}/revoke/").status_code == 303
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert clients["alice"].post("/tokens/", {"name": ""}).status_code == 422


def test_no_page_refers_to_an_outside_host(clients: Any, jobs: Any, samples: Any) -> None:
    import re

    for url in (
        "/",
        "/jobs/new/",
        f"/jobs/{jobs.a_running.pk}/",
        "/queues/",
        "/cluster/",
        "/utilization/",
        "/teams/team-a/",
        "/tokens/",
    ):
        body = clients["root"].get(url).content.decode()
        for ref in re.findall(r'(?:src|href)="([^"]+)"', body):
            assert not re.match(r"^(https?:)?//", ref), (url, ref)
