"""The submit form's dependency and array fields: judged by the API's services (same messages
at the same fields, nothing written on a refusal) and shown in the curl to copy."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils.html import escape
from rest_framework.test import APIClient

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobArray, JobDependency, JobHold

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}
GOOD = {
    "team": "team-a",
    "flavor": "h100",
    "name": "train",
    "image": "ghcr.io/acme/train:1",
    "workers": "1",
    "gpus_per_worker": "1",
    "priority": "0",
}
BODY = {"team": "team-a", "flavor": "h100", "name": "train", "image": "ghcr.io/acme/train:1"}


def _api(world: Any) -> APIClient:
    api = APIClient()
    api.force_authenticate(world.alice)
    return api


def test_a_job_submitted_after_others_waits_for_them(clients: Any, nodes: Any, submit: Any) -> None:
    prep, tokenize = submit(name="prep"), submit(name="tokenize")
    typed = {**GOOD, "after_ok": f"{prep.pk}, {tokenize.pk}", "keep_if_unmet": "on"}
    response = clients["alice"].post("/jobs/new/", typed)
    job = Job.objects.get(name="train")
    assert response.status_code == 303 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.hold, job.keep_if_unmet) == (JobHold.DEPENDENCIES, True)
    assert sorted(JobDependency.objects.filter(job=job).values_list("upstream_id", "kind")) == [
        (prep.pk, "after_ok"),
        (tokenize.pk, "after_ok"),
    ]


@pytest.mark.parametrize(
    ("field", "upstream_state"),
    [("after_ok", JobState.FAILED), ("after_not_ok", JobState.SUCCEEDED)],
)
def test_a_dependency_that_could_never_be_met_is_refused_as_the_api_refuses_it(
    clients: Any, nodes: Any, submit: Any, world: Any, field: str, upstream_state: str
) -> None:
    ended = submit(name="ended")
    Job.objects.filter(pk=ended.pk).update(state=upstream_state)
    api_error = _api(world).post("/api/v1/jobs/", {**BODY, field: [ended.pk]}, format="json")
    assert api_error.status_code == 400
    message = api_error.json()["error"]["fields"][field][0]
    page = clients["alice"].post("/jobs/new/", {**GOOD, field: str(ended.pk)}, **HX)
    assert page.status_code == 422
    html = page.content.decode()
    assert f'id="error-{field}"' in html and message in html
    assert Job.objects.count() == 1 and not JobDependency.objects.exists()


def test_another_teams_job_is_refused_as_unseen_and_nothing_is_written(
    clients: Any, nodes: Any, submit: Any, world: Any
) -> None:
    theirs = submit(world.carol, team=world.team_b, name="theirs")
    page = clients["alice"].post("/jobs/new/", {**GOOD, "after_any": str(theirs.pk)}, **HX)
    assert page.status_code == 422
    assert f"No job {theirs.pk} among the jobs you can see." in page.content.decode()
    page = clients["alice"].post("/jobs/new/", {**GOOD, "after_any": "12, x"}, **HX)
    assert page.status_code == 422 and "&quot;x&quot; is not a job id" in page.content.decode()
    assert Job.objects.count() == 1


def test_an_array_from_the_form_opens_the_arrays_page(clients: Any, nodes: Any) -> None:
    response = clients["alice"].post("/jobs/new/", {**GOOD, "array": "0-9%2"})
    array = JobArray.objects.get()
    assert response.status_code == 303 and response["Location"] == f"/arrays/{array.pk}/"
    assert (array.size, array.max_concurrent) == (10, 2)
    assert sorted(Job.objects.filter(array=array).values_list("array_index", flat=True)) == list(
        range(10)
    )


def test_a_bad_array_is_refused_with_the_apis_message(clients: Any, nodes: Any, world: Any) -> None:
    api_error = _api(world).post("/api/v1/arrays/", {**BODY, "array": "9-0"}, format="json")
    assert api_error.status_code == 400
    message = api_error.json()["error"]["fields"]["array"][0]
    page = clients["alice"].post("/jobs/new/", {**GOOD, "array": "9-0"}, **HX)
    assert page.status_code == 422
    html = page.content.decode()
    assert 'id="error-array"' in html and escape(message) in html  # the page escapes its quotes
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_the_curl_carries_the_dependencies_and_posts_an_array_to_arrays(
    clients: Any, nodes: Any, submit: Any
) -> None:
    prep = submit(name="prep")
    typed = {**GOOD, "after_ok": str(prep.pk), "keep_if_unmet": "on"}
    curl = clients["alice"].get("/jobs/new/curl/", typed, **HX).content.decode()
    assert f"&quot;after_ok&quot;: [\n    {prep.pk}\n  ]" in curl
    assert "&quot;keep_if_unmet&quot;: true" in curl and "/api/v1/jobs/" in curl
    assert 'id="curl-refused"' not in curl
    plain = clients["alice"].get("/jobs/new/curl/", GOOD, **HX).content.decode()
    assert "keep_if_unmet" not in plain and "after_ok" not in plain
    array = clients["alice"].get("/jobs/new/curl/", {**GOOD, "array": "0-99%10"}, **HX)
    html = array.content.decode()
    assert "/api/v1/arrays/" in html and "&quot;array&quot;: &quot;0-99%10&quot;" in html
    missing = clients["alice"].get("/jobs/new/curl/", {**GOOD, "after_ok": "999999"}, **HX)
    assert "No job 999999 among the jobs you can see." in missing.content.decode()
    assert Job.objects.count() == 1
