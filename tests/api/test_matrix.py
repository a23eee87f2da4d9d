"""Every endpoint and method as each persona: alice (team-a member), bob (team-a admin), carol
(team-b member), root (site admin) and anonymous. Another team's objects answer 404; what a
user can see but may not do answers 403; anonymous callers get 401."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from gpuqueue.models import Flavor
from teams.models import AuditEntry, Membership
from teams.services import create_token
from tests.api.test_logs import start_job

PERSONAS = ("alice", "bob", "carol", "root", None)
ALL_OK = {"alice": 200, "bob": 200, "carol": 200, "root": 200, None: 401}
NEW_JOB = {"team": "team-a", "flavor": "h100", "name": "m", "image": "ghcr.io/acme/train:1"}


@dataclass(frozen=True)
class Row:
    method: str
    url: str
    want: dict[str | None, int]
    body: dict[str, Any] = field(default_factory=dict)

    def id(self) -> str:
        return f"{self.method} {self.url}"


def admin_only(ok: int) -> dict[str | None, int]:
    return {"alice": 403, "bob": 403, "carol": 403, "root": ok, None: 401}


ROWS = [
    # Jobs
    Row("GET", "/api/v1/jobs/", ALL_OK),
    Row(
        "POST",
        "/api/v1/jobs/",
        {"alice": 201, "bob": 201, "carol": 400, "root": 201, None: 401},
        NEW_JOB,
    ),
    Row(
        "GET",
        "/api/v1/jobs/{alice_job}/",
        {"alice": 200, "bob": 200, "carol": 404, "root": 200, None: 401},
    ),
    Row(
        "GET",
        "/api/v1/jobs/{carol_job}/",
        {"alice": 404, "bob": 404, "carol": 200, "root": 200, None: 401},
    ),
    Row(
        "GET",
        "/api/v1/jobs/{alice_job}/events/",
        {"alice": 200, "bob": 200, "carol": 404, "root": 200, None: 401},
    ),
    # Logs are read as the job is: the same roles, another team's job 404.
    Row(
        "GET",
        "/api/v1/jobs/{alice_started}/logs/",
        {"alice": 200, "bob": 200, "carol": 404, "root": 200, None: 401},
    ),
    Row(
        "GET",
        "/api/v1/jobs/{carol_started}/logs/?worker=0&tail=5",
        {"alice": 404, "bob": 404, "carol": 200, "root": 200, None: 401},
    ),
    Row(
        "POST",
        "/api/v1/jobs/{alice_started}/logs/",
        {"alice": 405, "bob": 405, "carol": 405, "root": 405, None: 401},
    ),
    Row(
        "POST",
        "/api/v1/jobs/{alice_job}/cancel/",
        {"alice": 200, "bob": 200, "carol": 404, "root": 200, None: 401},
    ),
    Row(
        "POST",
        "/api/v1/jobs/{bob_job}/cancel/",
        {"alice": 403, "bob": 200, "carol": 404, "root": 200, None: 401},
    ),
    Row(
        "POST",
        "/api/v1/jobs/{carol_job}/cancel/",
        {"alice": 404, "bob": 404, "carol": 200, "root": 200, None: 401},
    ),
    Row(
        "DELETE",
        "/api/v1/jobs/{alice_job}/",
        {"alice": 405, "bob": 405, "carol": 405, "root": 405, None: 401},
    ),
    # Teams
    Row("GET", "/api/v1/teams/", ALL_OK),
    Row("POST", "/api/v1/teams/", admin_only(201), {"slug": "t3", "name": "T3", "namespace": "t3"}),
    Row(
        "GET",
        "/api/v1/teams/team-a/",
        {"alice": 200, "bob": 200, "carol": 404, "root": 200, None: 401},
    ),
    Row(
        "PATCH",
        "/api/v1/teams/team-a/",
        {"alice": 403, "bob": 403, "carol": 404, "root": 200, None: 401},
        {"name": "Renamed"},
    ),
    Row(
        "DELETE",
        "/api/v1/teams/team-a/",
        {"alice": 405, "bob": 405, "carol": 405, "root": 405, None: 401},
    ),
    # Memberships
    Row("GET", "/api/v1/memberships/", ALL_OK),
    Row(
        "POST",
        "/api/v1/memberships/",
        {"alice": 403, "bob": 201, "carol": 400, "root": 201, None: 401},
        {"team": "team-a", "user": "carol", "role": "member"},
    ),
    Row(
        "GET",
        "/api/v1/memberships/{alice_membership}/",
        {"alice": 200, "bob": 200, "carol": 404, "root": 200, None: 401},
    ),
    Row(
        "PATCH",
        "/api/v1/memberships/{alice_membership}/",
        {"alice": 403, "bob": 200, "carol": 404, "root": 200, None: 401},
        {"role": "admin"},
    ),
    Row(
        "DELETE",
        "/api/v1/memberships/{alice_membership}/",
        {"alice": 403, "bob": 204, "carol": 404, "root": 204, None: 401},
    ),
    Row(
        "DELETE",
        "/api/v1/memberships/{carol_membership}/",
        {"alice": 404, "bob": 404, "carol": 403, "root": 204, None: 401},
    ),
    # Flavors
    Row("GET", "/api/v1/flavors/", ALL_OK),
    Row("GET", "/api/v1/flavors/h100/", ALL_OK),
    Row(
        "POST",
        "/api/v1/flavors/",
        admin_only(201),
        {
            "name": "a100",
            "resource_name": "nvidia.com/gpu",
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100"},
        },
    ),
    Row("PATCH", "/api/v1/flavors/h100/", admin_only(200), {"description": "H100 80GB"}),
    Row("DELETE", "/api/v1/flavors/spare/", admin_only(204)),
    Row("DELETE", "/api/v1/flavors/h100/", admin_only(409)),  # quotas and jobs use it
    # Quotas
    Row("GET", "/api/v1/quotas/", ALL_OK),
    Row("GET", "/api/v1/quotas/{quota}/", ALL_OK),
    Row(
        "POST",
        "/api/v1/quotas/",
        admin_only(201),
        {"team": "team-a", "flavor": "spare", "guarantee": 0, "limit": 4},
    ),
    Row("PATCH", "/api/v1/quotas/{quota}/", admin_only(200), {"limit": 24}),
    Row("DELETE", "/api/v1/quotas/{quota}/", admin_only(204)),
    # Nodes
    Row("GET", "/api/v1/nodes/", ALL_OK),
    Row("GET", "/api/v1/nodes/h100-0/", ALL_OK),
    Row("POST", "/api/v1/nodes/h100-0/drain/", admin_only(200)),
    Row("POST", "/api/v1/nodes/h100-0/undrain/", admin_only(200)),
    Row(
        "DELETE",
        "/api/v1/nodes/h100-0/",
        {"alice": 405, "bob": 405, "carol": 405, "root": 405, None: 401},
    ),
    # Utilization
    Row("GET", "/api/v1/utilization/", ALL_OK),
    Row("GET", "/api/v1/utilization/history/", ALL_OK),
    # Tokens
    Row("GET", "/api/v1/tokens/", ALL_OK),
    Row(
        "POST",
        "/api/v1/tokens/",
        {"alice": 201, "bob": 201, "carol": 201, "root": 201, None: 401},
        {"name": "ci"},
    ),
    Row(
        "POST",
        "/api/v1/tokens/",
        {"alice": 400, "bob": 400, "carol": 201, "root": 201, None: 401},
        {"name": "for-carol", "user": "carol"},
    ),
    Row(
        "GET",
        "/api/v1/tokens/{alice_token}/",
        {"alice": 200, "bob": 404, "carol": 404, "root": 200, None: 401},
    ),
    Row(
        "DELETE",
        "/api/v1/tokens/{alice_token}/",
        {"alice": 204, "bob": 404, "carol": 404, "root": 204, None: 401},
    ),
    # Audit
    Row("GET", "/api/v1/audit/", {"alice": 403, "bob": 200, "carol": 403, "root": 200, None: 401}),
    Row(
        "GET",
        "/api/v1/audit/{team_a_entry}/",
        {"alice": 403, "bob": 200, "carol": 403, "root": 200, None: 401},
    ),
    Row(
        "GET",
        "/api/v1/audit/{team_b_entry}/",
        {"alice": 403, "bob": 404, "carol": 403, "root": 200, None: 401},
    ),
    # Who am I; schema and docs are open; metrics want their own token (none is set here)
    Row("GET", "/api/v1/me/", ALL_OK),
    Row("GET", "/api/schema/", {"alice": 200, "bob": 200, "carol": 200, "root": 200, None: 200}),
    Row("GET", "/api/docs/", {"alice": 200, "bob": 200, "carol": 200, "root": 200, None: 200}),
    Row("GET", "/metrics", {"alice": 401, "bob": 401, "carol": 401, "root": 401, None: 401}),
]


@pytest.fixture
def objects(world: Any, submit: Any, cluster_file: Path) -> dict[str, Any]:
    spare = Flavor.objects.create(name="spare", resource_name="example.com/gpu")
    del spare
    quota = world.team_a.quotas.get(flavor=world.h100)
    AuditEntry.objects.create(
        action="quota.update", object_type="quota", object_repr="a", team=world.team_a
    )
    AuditEntry.objects.create(
        action="quota.update", object_type="quota", object_repr="b", team=world.team_b
    )
    token, _ = create_token(world.alice, name="second", actor=world.alice)
    return {
        "alice_job": submit(world.alice).pk,
        "bob_job": submit(world.bob).pk,
        "carol_job": submit(world.carol, team=world.team_b).pk,
        "alice_started": start_job(submit(world.alice), cluster_file).pk,
        "carol_started": start_job(submit(world.carol, team=world.team_b), cluster_file).pk,
        "alice_membership": Membership.objects.get(user=world.alice, team=world.team_a).pk,
        "carol_membership": Membership.objects.get(user=world.carol).pk,
        "quota": quota.pk,
        "alice_token": token.pk,
        "team_a_entry": AuditEntry.objects.get(object_repr="a").pk,
        "team_b_entry": AuditEntry.objects.get(object_repr="b").pk,
    }


@pytest.mark.parametrize("row", ROWS, ids=Row.id)
def test_each_persona_gets_the_expected_status(row: Row, api: Any, objects: Any) -> None:
    """One row, five personas; each request runs in a savepoint that is rolled back, so that
    bob deleting a membership does not change what root sees next."""
    url = row.url.format(**objects)
    got: dict[str | None, int] = {}
    for persona in PERSONAS:
        with transaction.atomic():
            response = getattr(api(persona), row.method.lower())(
                url, row.body or None, format="json"
            )
            transaction.set_rollback(True)
        got[persona] = response.status_code
        if response.status_code >= 400 and url.startswith("/api/v1/"):
            error = response.json()["error"]
            assert error["code"] and error["message"], response.content
    assert got == row.want
