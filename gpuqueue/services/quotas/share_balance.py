"""Time-based fair share in the live cycle: the balances kept in PostgreSQL (`ShareBalance`),
advanced by every admission cycle with the engine's own arithmetic (scheduler/usage.py).

1. Load: every stored balance and the time the cycle last advanced them to (one query).
2. Advance: from that time to the cycle's `now`, crediting each team with its fair share less
   the GPUs it holds, as the snapshot shows them (held by admitted, running and preempting
   jobs; asked for by pending ones). At most `max_credit_seconds()` of the interval is
   credited: after a gap (the worker or the beat was down) the state seen now did not
   necessarily stand all along, and guessing it did would charge or credit hours of GPU-time
   on one observation. The whole gap still decays, as time did pass.
3. Store: every balance in one upsert, inside the cycle's transaction and under its advisory
   lock, so that only one cycle advances them at a time and a cycle that fails (rolls back)
   leaves them as they were.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cache

from django.conf import settings
from django.db import connection

from gpuqueue.models import Flavor, ShareBalance
from gpuqueue.scheduler import model as m
from gpuqueue.scheduler import usage
from gpuqueue.scheduler.fairshare import capacity_by_flavor
from teams.models import Team

Key = usage.Key

# The credit after a gap: this many cycle periods, and never less than a minute (a cycle can
# wait behind a forecast or a slow one before it).
CREDIT_CYCLES = 10
CREDIT_MIN_SECONDS = 60.0


def max_credit_seconds() -> float:
    """The longest interval one cycle credits (see the module's docstring, step 2)."""
    return max(CREDIT_CYCLES * settings.GPUQUEUE_CYCLE_SECONDS, CREDIT_MIN_SECONDS)


def load_balances() -> tuple[dict[Key, float], datetime | None]:
    """The stored balances per (team slug, flavor name), and the time they were advanced to
    (None before the first cycle)."""
    balances: dict[Key, float] = {}
    last: datetime | None = None
    rows = ShareBalance.objects.values_list("team__slug", "flavor__name", "balance", "updated_at")
    for team, flavor, balance, updated_at in rows.order_by():
        balances[(team, flavor)] = balance
        last = updated_at if last is None else max(last, updated_at)
    return balances, last


@dataclass
class LiveBalances:
    """The balances one cycle advanced, for its snapshot and for `store_balances`."""

    balances: usage.ShareBalance
    stored: set[Key] = field(default_factory=set)  # the rows read, rewritten even if dropped
    advanced: bool = True  # False: the stored time is not before now, nothing to write

    def snapshot(self) -> dict[Key, float]:
        return self.balances.snapshot()


def advance_balances(snapshot: m.Snapshot, half_life_seconds: float) -> LiveBalances:
    """Steps 1 and 2: the stored balances advanced to `snapshot.now`."""
    stored, last = load_balances()
    held, asked = usage.held_and_asked(snapshot.running, snapshot.pending)
    since = last.timestamp() if last is not None else None
    balances = usage.ShareBalance(
        snapshot.teams, capacity_by_flavor(snapshot), half_life_seconds, stored, since
    )
    if since is not None and snapshot.now <= since:
        # Another worker's clock ran ahead of this one: keep the balances and their time.
        return LiveBalances(balances, set(stored), advanced=False)
    balances.advance(snapshot.now, held, asked, max_credit_seconds())
    return LiveBalances(balances, set(stored))


def store_balances(live: LiveBalances, now: datetime) -> None:
    """Step 3: one INSERT … ON CONFLICT for every team and flavor with a quota or a stored row;
    a balance the decay dropped (under 1 GPU-second) is written as 0."""
    if not live.advanced:
        return
    balances = live.balances.balance
    keys = set(live.stored) | set(balances)
    for flavor, quotas in live.balances.quotas.items():
        keys.update((team, flavor) for team in quotas)
    if not keys:
        return
    ordered = sorted(keys)
    with connection.cursor() as cursor:
        cursor.execute(
            _upsert_sql(),
            [
                now,
                [team for team, _ in ordered],
                [flavor for _, flavor in ordered],
                [float(balances.get(key, 0.0)) for key in ordered],
            ],
        )


@cache
def _upsert_sql() -> str:
    quote = connection.ops.quote_name
    table = quote(ShareBalance._meta.db_table)
    team_id = quote(ShareBalance._meta.get_field("team").column)
    flavor_id = quote(ShareBalance._meta.get_field("flavor").column)
    return (
        f"INSERT INTO {table} ({team_id}, {flavor_id}, {quote('balance')}, "
        f"{quote('updated_at')}) "
        f"SELECT {quote('t')}.{quote('id')}, {quote('f')}.{quote('id')}, "
        f"{quote('v')}.{quote('balance')}, %s "
        f"FROM unnest(%s::text[], %s::text[], %s::float8[]) "
        f"AS {quote('v')} ({quote('team')}, {quote('flavor')}, {quote('balance')}) "
        f"JOIN {quote(Team._meta.db_table)} {quote('t')} "
        f"ON {quote('t')}.{quote('slug')} = {quote('v')}.{quote('team')} "
        f"JOIN {quote(Flavor._meta.db_table)} {quote('f')} "
        f"ON {quote('f')}.{quote('name')} = {quote('v')}.{quote('flavor')} "
        f"ON CONFLICT ({team_id}, {flavor_id}) DO UPDATE SET "
        f"{quote('balance')} = EXCLUDED.{quote('balance')}, "
        f"{quote('updated_at')} = EXCLUDED.{quote('updated_at')}"
    )


def balance_hours() -> dict[Key, float]:
    """Every stored balance in GPU-hours, for the pages and the API (positive: owed)."""
    return {key: value / 3600 for key, value in load_balances()[0].items()}
