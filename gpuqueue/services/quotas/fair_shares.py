"""The fair shares the admission cycle planned with, kept for everyone who shows them.

The engine computes each team's fair share inside `plan` (Plan.fair_shares); the cycle stores
them here in its own transaction, so the queue overview, the utilization API and /metrics show
the numbers the last cycle admitted by, and none of them runs the engine itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from gpuqueue.models import FairShare, Flavor
from teams.models import Team

Key = tuple[str, str]  # (team slug, flavor name)


def store_fair_shares(shares: Mapping[Key, int], now: datetime) -> None:
    """Replace the stored shares with `shares`: rows that changed are updated, new ones
    inserted, those of parties the plan no longer gives a share (a quota removed) deleted."""
    teams = dict(Team.objects.filter(slug__in={t for t, _ in shares}).values_list("slug", "id"))
    flavors = dict(Flavor.objects.values_list("name", "id"))
    wanted = {
        (teams[team], flavors[flavor]): gpus
        for (team, flavor), gpus in shares.items()
        if team in teams and flavor in flavors
    }
    stored = {(r.team_id, r.flavor_id): r for r in FairShare.objects.all()}
    FairShare.objects.filter(pk__in=[r.pk for k, r in stored.items() if k not in wanted]).delete()
    changed = []
    for (team_id, flavor_id), gpus in wanted.items():
        row = stored.get((team_id, flavor_id))
        if row is not None and row.gpus != gpus:
            row.gpus, row.planned_at = gpus, now
            changed.append(row)
    FairShare.objects.bulk_update(changed, ["gpus", "planned_at"])
    FairShare.objects.bulk_create(
        FairShare(team_id=team_id, flavor_id=flavor_id, gpus=gpus, planned_at=now)
        for (team_id, flavor_id), gpus in wanted.items()
        if (team_id, flavor_id) not in stored
    )


def stored_fair_shares() -> dict[Key, int]:
    """The last cycle's fair share per (team, flavor); parties without a quota do not appear."""
    rows = FairShare.objects.values_list("team__slug", "flavor__name", "gpus").order_by()
    return {(team, flavor): gpus for team, flavor, gpus in rows}
