"""The team page shows what the team's jobs may use in its namespace; its admins change it there,
through the service the API uses (same rules, same audit trail)."""

from __future__ import annotations

from typing import Any

import pytest

from teams.models import AuditEntry, Team

pytestmark = pytest.mark.django_db

LISTS = {
    "allowed_service_accounts": "trainer",
    "allowed_secrets": "wandb, ghcr-*",
    "allowed_claims": "imagenet scratch",
}


def _lists(world: Any) -> tuple[list[str], list[str], list[str]]:
    team = Team.objects.get(pk=world.team_a.pk)
    return team.allowed_service_accounts, team.allowed_secrets, team.allowed_claims


@pytest.mark.parametrize(
    ("persona", "status", "form"),
    [("alice", 200, False), ("bob", 200, True), ("carol", 404, False), ("root", 200, True)],
)
def test_members_see_the_lists_and_admins_get_the_form(
    persona: str, status: int, form: bool, clients: Any, world: Any
) -> None:
    Team.objects.filter(pk=world.team_a.pk).update(allowed_secrets=["wandb"])
    response = clients[persona].get("/teams/team-a/")
    assert response.status_code == status
    if status == 200:
        page = response.content.decode()
        assert "What jobs may use in" in page and "wandb" in page
        assert ('action="/teams/team-a/allowed/"' in page) is form


@pytest.mark.parametrize(
    ("persona", "status"), [("alice", 403), ("bob", 303), ("carol", 404), ("root", 303)]
)
def test_only_team_admins_and_site_admins_change_them(
    persona: str, status: int, clients: Any, world: Any
) -> None:
    response = clients[persona].post("/teams/team-a/allowed/", LISTS)
    assert response.status_code == status
    if status == 303:
        assert _lists(world) == (["trainer"], ["wandb", "ghcr-*"], ["imagenet", "scratch"])
        assert AuditEntry.objects.filter(action="team.allowed", actor__username=persona)
    else:
        assert _lists(world) == ([], [], []) and not AuditEntry.objects.exists()


def test_a_bad_name_comes_back_at_its_field_with_422(clients: Any, world: Any) -> None:
    response = clients["bob"].post("/teams/team-a/allowed/", {**LISTS, "allowed_secrets": "WandB"})
    assert response.status_code == 422
    assert "&#x27;WandB&#x27; is not a Kubernetes name" in response.content.decode()
    assert _lists(world) == ([], [], [])


def test_emptied_fields_allow_nothing_again(clients: Any, world: Any) -> None:
    clients["bob"].post("/teams/team-a/allowed/", LISTS)
    clients["bob"].post("/teams/team-a/allowed/", {})
    assert _lists(world) == ([], [], [])
