"""Quota edits by site admins: validated against the cluster and the jobs that run, audited."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Sum

from gpuqueue.core.errors import Forbidden, Refused
from gpuqueue.models import Flavor, Quota
from gpuqueue.services.cluster.inventory import flavor_capacity, held_non_preemptible
from gpuqueue.services.jobs.validation import FieldErrors, bound_errors
from teams.models import AuditEntry, Team

QUOTA_MAX = 1_000_000
# The lowest and highest value of each number of a quota.
QUOTA_BOUNDS: dict[str, tuple[int, int]] = {
    "guarantee": (0, QUOTA_MAX),
    "limit": (0, QUOTA_MAX),
    "weight": (0, QUOTA_MAX),
}
DEFAULT_WEIGHT = 1.0


@dataclass(frozen=True)
class QuotaChange:
    quota: Quota
    created: bool
    # True when the flavor's guarantees now add up to more than its capacity (allowed only
    # with oversubscribe=True, and reported back so that the admin sees it).
    oversubscribed: bool
    capacity: int
    guarantees_total: int


def quota_state(quota: Quota | None) -> dict[str, Any] | None:
    if quota is None:
        return None
    return {
        "team": quota.team.slug,
        "flavor": quota.flavor.name,
        "guarantee": quota.guarantee,
        "limit": quota.limit,
        "weight": quota.weight,
    }


def quota_field_errors(field: str, value: float | None) -> list[str]:
    """The rules of one number of a quota alone (None: left unset)."""
    lowest, highest = QUOTA_BOUNDS[field]
    return [] if value is None else bound_errors(value, lowest, highest)


def quota_errors(guarantee: int, limit: int, weight: float = DEFAULT_WEIGHT) -> FieldErrors:
    """Each number within its bounds, then, once they are, the guarantee within the limit."""
    numbers = {"guarantee": guarantee, "limit": limit, "weight": weight}
    errors = {
        field: messages
        for field, value in numbers.items()
        if (messages := quota_field_errors(field, value))
    }
    if not errors and guarantee > limit:
        errors["guarantee"] = [f"The guarantee ({guarantee}) may not exceed the limit ({limit})."]
    return errors


def check_quota(values: Mapping[str, Any], *, refused: Collection[str] = ()) -> FieldErrors:
    """`quota_errors` for a caller that reads the numbers itself. `refused` names those whose
    type it refused already: the others are checked alone, and the guarantee is not compared
    with the limit."""
    if refused:
        return {
            field: messages
            for field in QUOTA_BOUNDS
            if field not in refused and (messages := quota_field_errors(field, values.get(field)))
        }
    return quota_errors(values["guarantee"], values["limit"], values.get("weight", DEFAULT_WEIGHT))


def _require_site_admin(actor: Any) -> None:
    if not getattr(actor, "is_superuser", False):
        raise Forbidden("only a site admin may change quotas")


def set_quota(
    actor: Any,
    team: Team,
    flavor: Flavor,
    *,
    guarantee: int,
    limit: int,
    weight: float = DEFAULT_WEIGHT,
    oversubscribe: bool = False,
) -> QuotaChange:
    """Create or change the quota of `team` for `flavor`.

    1. Only site admins; the flavor row is locked so that two edits of one flavor's
       guarantees cannot both pass the capacity check.
    2. The numbers within their bounds, guarantee ≤ limit (`quota_errors`).
    3. The guarantee may not drop below what the team's non-preemptible jobs of the flavor
       hold now: those jobs may only use the guarantee and are never preempted.
    4. The flavor's guarantees must fit its capacity (ready nodes), unless `oversubscribe`.
    5. Write the quota and an audit entry with before and after, in one transaction.
    """
    _require_site_admin(actor)
    fields = quota_errors(guarantee, limit, weight)
    if fields:
        raise Refused("The quota is invalid; see fields.", fields=fields, code="invalid")
    with transaction.atomic():
        Flavor.objects.select_for_update().get(pk=flavor.pk)
        current = (
            Quota.objects.select_related("team", "flavor").filter(team=team, flavor=flavor).first()
        )
        before = quota_state(current)
        held = held_non_preemptible(team.pk, flavor.pk)
        if guarantee < held:
            raise Refused(
                f"Team {team.slug}'s non-preemptible jobs hold {held} {flavor.name} GPUs; the "
                f"guarantee cannot be cut to {guarantee} below that.",
                fields={
                    "guarantee": [
                        f"Non-preemptible jobs of {team.slug} hold {held} {flavor.name} GPUs; "
                        f"a guarantee of {guarantee} is {held - guarantee} short."
                    ]
                },
                code="below_usage",
            )
        others = (
            Quota.objects.filter(flavor=flavor)
            .exclude(team=team)
            .aggregate(total=Sum("guarantee"))["total"]
            or 0
        )
        capacity = flavor_capacity(flavor)
        total = int(others) + guarantee
        oversubscribed = total > capacity
        if oversubscribed and not oversubscribe:
            raise Refused(
                f"The guarantees of {flavor.name} would total {total} GPUs, more than the "
                f"{capacity} the cluster has.",
                fields={
                    "guarantee": [
                        f"Guarantees of {flavor.name} would total {total} GPUs (others {others}, "
                        f"this {guarantee}) against a capacity of {capacity}; to keep it, allow "
                        "guarantees beyond capacity (`oversubscribe` in the API): then not every "
                        "guarantee can be honoured at once."
                    ]
                },
                code="over_capacity",
            )
        if current is None:
            quota = Quota.objects.create(
                team=team, flavor=flavor, guarantee=guarantee, limit=limit, weight=weight
            )
        else:
            quota = current
            quota.guarantee, quota.limit, quota.weight = guarantee, limit, weight
            quota.save(update_fields=["guarantee", "limit", "weight"])
        after = quota_state(quota)
        if after is not None and oversubscribed:
            after["oversubscribed"] = True
        AuditEntry.objects.create(
            actor=actor,
            action="quota.create" if current is None else "quota.update",
            object_type="quota",
            object_repr=f"{team.slug}/{flavor.name}",
            team=team,
            before=before,
            after=after,
        )
    return QuotaChange(quota, current is None, oversubscribed, capacity, total)


def delete_quota(actor: Any, quota: Quota) -> None:
    """Remove a quota; refused while non-preemptible jobs of the team hold the flavor."""
    _require_site_admin(actor)
    with transaction.atomic():
        quota = Quota.objects.select_for_update().select_related("team", "flavor").get(pk=quota.pk)
        held = held_non_preemptible(quota.team_id, quota.flavor_id)
        if held:
            raise Refused(
                f"Non-preemptible jobs of {quota.team.slug} hold {held} {quota.flavor.name} "
                "GPUs; the quota cannot be removed while they run.",
                fields={"guarantee": [f"{held} GPUs held by non-preemptible jobs."]},
                status=409,
                code="below_usage",
            )
        before = quota_state(quota)
        AuditEntry.objects.create(
            actor=actor,
            action="quota.delete",
            object_type="quota",
            object_repr=f"{quota.team.slug}/{quota.flavor.name}",
            team=quota.team,
            before=before,
            after=None,
        )
        quota.delete()
