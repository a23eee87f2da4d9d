"""With what processes keep between requests (gpuqueue.core.caches) the API answers as it does
with the caches off, whatever changes in between: memberships, node sizes, revoked tokens."""

from __future__ import annotations

from typing import Any

from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuqueue.models import Node
from teams.models import ApiToken, Membership, Role, Team
from teams.services import revoke_token

PERSONAS = ("alice", "bob", "carol", "root")
VOLATILE = {"id", "submitted_at", "updated_at", "created_at"}

STEPS = st.lists(
    st.tuples(
        st.sampled_from(["submit", "submit", "submit", "join", "leave", "resize", "revoke"]),
        st.sampled_from(PERSONAS),
        st.sampled_from(["team-a", "team-b", None]),
        st.sampled_from(["h100", "l4"]),
        st.integers(1, 12),
    ),
    max_size=12,
)


def _reset(world: Any) -> None:
    """The world as the fixtures made it, for each example."""
    ApiToken.objects.update(revoked_at=None)
    Membership.objects.all().delete()
    Membership.objects.create(user=world.alice, team=world.team_a, role=Role.MEMBER)
    Membership.objects.create(user=world.bob, team=world.team_a, role=Role.ADMIN)
    Membership.objects.create(user=world.carol, team=world.team_b, role=Role.MEMBER)
    for node in Node.objects.all():
        node.capacity = {"nvidia.com/gpu": 8 if node.name.startswith("h100") else 4}
        node.save()


def _answer(response: Any) -> tuple[int, Any]:
    body = response.json()
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in VOLATILE}
    return response.status_code, body


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=STEPS)
def test_the_api_answers_the_same_with_the_caches_on_and_off(
    api: Any, world: Any, steps: Any
) -> None:
    clients = {persona: api(persona) for persona in PERSONAS}
    _reset(world)
    for action, persona, slug, flavor, gpus in steps:
        user = getattr(world, persona)
        if action == "join" and slug:
            Membership.objects.get_or_create(
                user=user, team=Team.objects.get(slug=slug), defaults={"role": Role.MEMBER}
            )
        elif action == "leave" and slug:
            Membership.objects.filter(user=user, team__slug=slug).delete()
        elif action == "resize":
            node = Node.objects.get(name=f"{flavor}-0")
            node.capacity = {"nvidia.com/gpu": gpus}
            node.save()
        elif action == "revoke":
            for token in ApiToken.objects.filter(user=user, revoked_at=None):
                revoke_token(user, token)
        body = {"flavor": flavor, "image": "ghcr.io/acme/train:1", "gpus_per_worker": gpus}
        if slug:
            body["team"] = slug
        post = clients[persona].post
        kept = _answer(post("/api/v1/jobs/", body, format="json"))
        with override_settings(GPUQUEUE_CACHES=False):
            plain = _answer(post("/api/v1/jobs/", body, format="json"))
        assert kept == plain, (action, persona, slug, flavor, gpus)
