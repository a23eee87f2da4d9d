"""What a team's jobs may use in its namespace: the ServiceAccounts, Secrets and claims its admins
allow. gpuqueue's ServiceAccount makes the pods, so anything else is refused at submission, by
every way in, with a message naming it, and nothing is written."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from dashboard.forms import SubmitForm
from gpuqueue.models import Job, JobEvent
from teams.models import AuditEntry, Team

pytestmark = pytest.mark.django_db

URL = "/api/v1/teams/{}/allowed/"
EMPTY = {"service_accounts": [], "secrets": [], "claims": []}
LISTS = {"service_accounts": ["trainer"], "secrets": ["wandb", "ghcr-*"], "claims": ["imagenet"]}


def _allow(team: Team, **lists: list[str]) -> None:
    Team.objects.filter(pk=team.pk).update(**{f"allowed_{k}": v for k, v in lists.items()})


def _written() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


# --- The endpoint, tried as every persona --------------------------------------------------------

READS = [("alice", 200), ("bob", 200), ("carol", 404), ("root", 200), (None, 401)]
WRITES = [("alice", 403), ("bob", 200), ("carol", 404), ("root", 200), (None, 401)]


@pytest.mark.parametrize(("persona", "status"), READS)
def test_members_and_site_admins_read_the_lists(
    persona: str | None, status: int, api: Any, world: Any
) -> None:
    _allow(world.team_a, service_accounts=["trainer"])
    response = api(persona).get(URL.format("team-a"))
    assert response.status_code == status, response.content
    if status == 200:
        assert response.json() == {**EMPTY, "service_accounts": ["trainer"]}


@pytest.mark.parametrize("method", ["put", "patch"])
@pytest.mark.parametrize(("persona", "status"), WRITES)
def test_only_team_admins_and_site_admins_change_them(
    method: str, persona: str | None, status: int, api: Any, world: Any
) -> None:
    response = getattr(api(persona), method)(URL.format("team-a"), LISTS, format="json")
    assert response.status_code == status, response.content
    team = Team.objects.get(pk=world.team_a.pk)
    kept = (team.allowed_service_accounts, team.allowed_secrets, team.allowed_claims)
    if status == 200:
        assert response.json() == LISTS
        assert kept == (["trainer"], ["wandb", "ghcr-*"], ["imagenet"])
        entry = AuditEntry.objects.get(action="team.allowed")
        assert entry.before == {
            "allowed_service_accounts": [],
            "allowed_secrets": [],
            "allowed_claims": [],
        }
        assert entry.team == team and entry.after["allowed_claims"] == ["imagenet"]
    else:
        assert kept == ([], [], []) and not AuditEntry.objects.filter(action="team.allowed")


def test_patch_changes_the_lists_it_names_and_put_replaces_all(api: Any, world: Any) -> None:
    _allow(world.team_a, service_accounts=["trainer"], claims=["imagenet"])
    patched = api("bob").patch(URL.format("team-a"), {"secrets": ["wandb"]}, format="json")
    assert patched.json() == {
        "service_accounts": ["trainer"],
        "secrets": ["wandb"],
        "claims": ["imagenet"],
    }
    put = api("bob").put(URL.format("team-a"), {"claims": ["scratch-*"]}, format="json")
    assert put.json() == {**EMPTY, "claims": ["scratch-*"]}


BAD_LISTS = [
    ("a name with capitals", {"secrets": ["WandB"]}, "secrets"),
    ("a name with a slash", {"claims": ["a/b"]}, "claims"),
    ("a name twice", {"service_accounts": ["trainer", "trainer"]}, "service_accounts"),
    ("no list", {"secrets": "wandb"}, "secrets"),
    ("65 names", {"claims": [f"c{i}" for i in range(65)]}, "claims"),
    ("an unknown list", {"configmaps": ["x"]}, "configmaps"),
]


@pytest.mark.parametrize(("what", "body", "field"), BAD_LISTS, ids=[c[0] for c in BAD_LISTS])
def test_a_bad_list_is_refused_at_its_field_and_changes_nothing(
    what: str, body: dict[str, Any], field: str, api: Any, world: Any
) -> None:
    response = api("bob").patch(URL.format("team-a"), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    team = Team.objects.get(pk=world.team_a.pk)
    assert (team.allowed_service_accounts, team.allowed_secrets, team.allowed_claims) == (
        [],
        [],
        [],
    )


def test_the_admin_s_form_checks_the_same_rule(world: Any) -> None:
    from django.core.exceptions import ValidationError

    world.team_a.allowed_secrets = ["Not A Name"]
    with pytest.raises(ValidationError) as refused:
        world.team_a.full_clean()
    assert "allowed_secrets" in refused.value.message_dict


# --- Submissions ---------------------------------------------------------------------------------

VOLUME = {"claim": "imagenet", "mount_path": "/data", "read_only": True}
UNLISTED = [
    (
        "a ServiceAccount",
        {"service_account": "cluster-admin-sa"},
        "service_account",
        "cluster-admin-sa",
    ),
    ("a Secret for env", {"env_from_secrets": ["db-root"]}, "env_from_secrets", "db-root"),
    (
        "a pull Secret",
        {"image_pull_secrets": ["other-registry"]},
        "image_pull_secrets",
        "other-registry",
    ),
    ("a claim", {"volumes": [{**VOLUME, "claim": "team-b-data"}]}, "volumes", "team-b-data"),
]


@pytest.mark.parametrize(
    ("what", "change", "field", "name"), UNLISTED, ids=[c[0] for c in UNLISTED]
)
def test_what_the_team_does_not_allow_is_refused_by_name_and_nothing_is_written(
    what: str, change: dict[str, Any], field: str, name: str, api: Any, job_body: Any, world: Any
) -> None:
    _allow(world.team_a, **{k: list(v) for k, v in LISTS.items()})
    before = _written()
    response = api("alice").post("/api/v1/jobs/", {**job_body, **change}, format="json")
    assert response.status_code == 400, response.content
    (message,) = response.json()["error"]["fields"][field]
    assert name in message and "team team-a" in message and "namespace team-a" in message
    assert _written() == before


def test_an_empty_list_allows_nothing_and_says_so(api: Any, job_body: Any) -> None:
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "env_from_secrets": ["wandb", "hf"]}, format="json"
    )
    assert response.status_code == 400
    (message,) = response.json()["error"]["fields"]["env_from_secrets"]
    assert message == (
        "Secrets wandb, hf of namespace team-a: not on team team-a's list of what its jobs may "
        "use (it lists none); a team admin adds them under the team's allowed secrets."
    )


def test_what_the_team_allows_is_accepted_globs_included(
    api: Any, job_body: Any, world: Any
) -> None:
    _allow(world.team_a, **{k: list(v) for k, v in LISTS.items()})
    body = {
        **job_body,
        "service_account": "trainer",
        "env_from_secrets": ["wandb"],
        "image_pull_secrets": ["ghcr-pull"],
        "volumes": [VOLUME],
    }
    response = api("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content


def test_another_team_s_list_does_not_count(api: Any, job_body: Any, world: Any) -> None:
    _allow(world.team_b, secrets=["wandb"])
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "env_from_secrets": ["wandb"]}, format="json"
    )
    assert response.status_code == 400


def test_without_a_team_the_only_team_s_list_decides(api: Any, job_body: Any, world: Any) -> None:
    body = {k: v for k, v in job_body.items() if k != "team"}
    refused = api("carol").post(
        "/api/v1/jobs/", {**body, "env_from_secrets": ["wandb"]}, format="json"
    )
    assert refused.status_code == 400 and "team team-b" in str(refused.json())
    _allow(world.team_b, secrets=["wandb"])
    accepted = api("carol").post(
        "/api/v1/jobs/", {**body, "env_from_secrets": ["wandb"]}, format="json"
    )
    assert accepted.status_code == 201, accepted.content
    assert accepted.json()["team"] == "team-b"


def test_an_array_is_refused_whole(api: Any, job_body: Any) -> None:
    body = {**job_body, "service_account": "trainer", "array": "0-9"}
    response = api("alice").post("/api/v1/arrays/", body, format="json")
    assert response.status_code == 400, response.content
    assert "service_account" in response.json()["error"]["fields"]
    assert _written() == (0, 0)


def test_the_form_refuses_with_the_same_message(world: Any, nodes: Any) -> None:
    form = SubmitForm(
        data={
            "team": "team-a",
            "flavor": "h100",
            "image": "ghcr.io/acme/train:1",
            "workers": "1",
            "gpus_per_worker": "1",
            "priority": "0",
            "volumes": "team-b-data:/data",
        },
        user=world.alice,
    )
    assert form.validated_submission() is None
    (message,) = form.errors["volumes"]
    assert message.startswith("PersistentVolumeClaim team-b-data of namespace team-a: not on")
    assert _written() == (0, 0)


def test_the_cli_prints_the_refusal_and_exits_4(cli: Any, capsys: Any) -> None:
    code = cli(
        "submit",
        "--team=team-a",
        "--flavor=h100",
        "--image=ghcr.io/acme/train:1",
        "--service-account=default-admin",
    )
    assert code == 4
    assert "ServiceAccount default-admin of namespace team-a" in capsys.readouterr().err
    assert _written() == (0, 0)


def test_the_django_admin_edits_the_lists_by_the_same_rule(world: Any, rf: Any) -> None:
    from django.contrib import admin

    request = rf.get("/")
    request.user = world.root
    form_class = admin.site._registry[Team].get_form(request, world.team_a)
    data = {"slug": "team-a", "name": "Team A", "namespace": "team-a"}
    lists = {"allowed_service_accounts": "[]", "allowed_claims": "[]"}
    bad = form_class(
        data={**data, **lists, "allowed_secrets": '["Not A Name"]'}, instance=world.team_a
    )
    assert not bad.is_valid() and "allowed_secrets" in bad.errors
    good = form_class(data={**data, **lists, "allowed_secrets": '["wandb"]'}, instance=world.team_a)
    assert good.is_valid(), good.errors
    good.save()
    assert Team.objects.get(pk=world.team_a.pk).allowed_secrets == ["wandb"]


def test_a_pattern_of_many_stars_against_a_long_name_answers_at_once() -> None:
    # A team admin writes the pattern and a member the name: the match must not backtrack.
    team = Team(allowed_secrets=["*" + "a*" * 120 + "b"])
    started = time.monotonic()
    assert team.unlisted("allowed_secrets", ["a" * 253]) == ["a" * 253]
    assert team.unlisted("allowed_secrets", ["a" * 120 + "b"]) == []
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(
    ("pattern", "name", "listed"),
    [
        ("wandb", "wandb", True),
        ("wandb", "wandb-x", False),
        ("ghcr-*", "ghcr-", True),
        ("ghcr-*", "ghcr-pull", True),
        ("*-pull", "ghcr-pull", True),
        ("a*b*a", "aba", True),
        ("a*b*a", "ab", False),
        ("a*a", "a", False),
        ("data-*.x*", "data-1.x", True),
        ("*", "anything", True),
    ],
)
def test_a_star_stands_for_any_run_of_characters(pattern: str, name: str, listed: bool) -> None:
    assert Team(allowed_claims=[pattern]).unlisted("allowed_claims", [name]) == (
        [] if listed else [name]
    )


# --- The Django admin ----------------------------------------------------------------------------


def _admin_form(team: Team, **lists: str) -> dict[str, str]:
    """The team's admin change form as a browser posts it: every field, the memberships
    inline untouched."""
    fields = {
        "slug": team.slug,
        "name": team.name,
        "namespace": team.namespace,
        "parent": "",
        "allowed_service_accounts": json.dumps(team.allowed_service_accounts),
        "allowed_secrets": json.dumps(team.allowed_secrets),
        "allowed_claims": json.dumps(team.allowed_claims),
        "memberships-TOTAL_FORMS": "0",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    return {**fields, **{f"allowed_{k}": v for k, v in lists.items()}}


def test_a_site_admin_s_edit_in_the_django_admin_is_audited_as_the_apis(
    client: Any, world: Any
) -> None:
    _allow(world.team_a, service_accounts=["trainer"])
    team = Team.objects.get(pk=world.team_a.pk)
    client.force_login(world.root)
    url = f"/admin/teams/team/{team.pk}/change/"
    renamed = client.post(url, _admin_form(team, name="Team A, renamed"))
    assert renamed.status_code == 302, renamed.content[:2000]
    assert not AuditEntry.objects.filter(action="team.allowed")  # the lists did not change

    saved = client.post(url, _admin_form(team, secrets='["wandb"]', claims='["imagenet"]'))
    assert saved.status_code == 302, saved.content[:2000]
    entry = AuditEntry.objects.get(action="team.allowed")
    assert (entry.actor, entry.team, entry.object_repr) == (world.root, team, "team-a")
    assert entry.before == {
        "allowed_service_accounts": ["trainer"],
        "allowed_secrets": [],
        "allowed_claims": [],
    }
    assert entry.after == {
        "allowed_service_accounts": ["trainer"],
        "allowed_secrets": ["wandb"],
        "allowed_claims": ["imagenet"],
    }
    # It is in the audit trail the API serves, as an API edit would be.
    trail = client.get("/api/v1/audit/", {"team": "team-a", "action": "team.allowed"})
    assert [row["id"] for row in trail.json()["results"]] == [entry.pk]


def test_a_team_made_in_the_django_admin_with_lists_is_audited(client: Any, world: Any) -> None:
    client.force_login(world.root)
    form = {
        **_admin_form(Team(slug="team-c", name="Team C", namespace="team-c")),
        "allowed_service_accounts": '["trainer"]',
    }
    assert client.post("/admin/teams/team/add/", form).status_code == 302
    entry = AuditEntry.objects.get(action="team.allowed")
    assert entry.team == Team.objects.get(slug="team-c")
    assert entry.before["allowed_service_accounts"] == []
    assert entry.after["allowed_service_accounts"] == ["trainer"]
