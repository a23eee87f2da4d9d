"""A flavor's security profile (the uid, gid and volume group of its workers, and whether root
is allowed): site admins set it through the API and the Django admin, with the same rules, and
its workers get it."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from gpuqueue.cycle.launch import launch_spec
from gpuqueue.models import Flavor, Job
from teams.models import AuditEntry

pytestmark = pytest.mark.django_db

BAD_PROFILES = [
    ("uid 0 without allow_root", {"run_as_user": 0}, "run_as_user"),
    ("a uid past 2^31 - 1", {"run_as_user": 2**31}, "run_as_user"),
    ("a negative gid", {"run_as_group": -1}, "run_as_group"),
    ("an fsGroup past 2^31 - 1", {"fs_group": 2**31}, "fs_group"),
    ("allow_root as a string", {"allow_root": "yes"}, "allow_root"),
]


@pytest.mark.parametrize(
    ("what", "change", "field"), BAD_PROFILES, ids=[c[0] for c in BAD_PROFILES]
)
def test_a_bad_profile_is_refused_at_its_field_and_changes_nothing(
    what: str, change: dict[str, Any], field: str, api: Any
) -> None:
    response = api("root").patch("/api/v1/flavors/h100/", change, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    flavor = Flavor.objects.get(name="h100")
    assert (flavor.run_as_user, flavor.run_as_group, flavor.fs_group) == (None, None, None)
    assert flavor.allow_root is False and not AuditEntry.objects.filter(action="flavor.update")


def test_uid_0_without_allow_root_says_so(api: Any) -> None:
    response = api("root").patch("/api/v1/flavors/h100/", {"run_as_user": 0}, format="json")
    (message,) = response.json()["error"]["fields"]["run_as_user"]
    assert message == "Running as uid 0 is running as root: set allow_root too."


@pytest.mark.parametrize("persona", ["alice", "bob", "carol"])
def test_only_a_site_admin_sets_a_profile(persona: str, api: Any) -> None:
    response = api(persona).patch("/api/v1/flavors/h100/", {"allow_root": True}, format="json")
    assert response.status_code == 403
    assert Flavor.objects.get(name="h100").allow_root is False


def test_a_root_profile_is_kept_audited_and_reaches_the_launch(api: Any, submit: Any) -> None:
    profile = {"allow_root": True, "run_as_user": 0, "run_as_group": 0, "fs_group": 1000}
    response = api("root").patch("/api/v1/flavors/h100/", profile, format="json")
    assert response.status_code == 200, response.content
    assert {key: response.json()[key] for key in profile} == profile
    entry = AuditEntry.objects.get(action="flavor.update")
    assert entry.before["allow_root"] is False and entry.after["run_as_user"] == 0
    job = submit(workers=1, gpus_per_worker=1)
    spec = launch_spec(Job.objects.select_related("team", "flavor").get(pk=job.pk))
    assert (spec.run_as_user, spec.run_as_group, spec.fs_group, spec.allow_root) == (
        0,
        0,
        1000,
        True,
    )


def test_by_default_a_flavor_is_restricted(api: Any, submit: Any) -> None:
    body = api("alice").get("/api/v1/flavors/h100/").json()
    assert (body["run_as_user"], body["run_as_group"], body["fs_group"]) == (None, None, None)
    assert body["allow_root"] is False
    job = submit()
    spec = launch_spec(Job.objects.select_related("team", "flavor").get(pk=job.pk))
    assert (spec.run_as_user, spec.allow_root) == (None, False)


def test_the_admin_s_form_checks_the_same_rule(world: Any) -> None:
    world.h100.run_as_user = 0
    with pytest.raises(ValidationError) as refused:
        world.h100.full_clean()
    assert "run_as_user" in refused.value.message_dict


def test_the_database_refuses_root_without_allow_root(world: Any) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Flavor.objects.filter(pk=world.h100.pk).update(run_as_user=0)


def test_the_django_admin_shows_the_profile(world: Any, rf: Any) -> None:
    from django.contrib import admin

    request = rf.get("/")
    request.user = world.root
    form_class = admin.site._registry[Flavor].get_form(request, world.h100)
    assert {"run_as_user", "run_as_group", "fs_group", "allow_root"} <= set(form_class.base_fields)
