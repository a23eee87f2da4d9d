"""What each team is entitled to at a moment, and how evenly entitlements were met."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuqueue.scheduler.model import Quota


def entitlements(
    capacity: float, demand: Mapping[str, float], quotas: Mapping[str, Quota]
) -> dict[str, float]:
    """Max-min fair GPUs per team for one flavor, the way DESIGN.md defines fair share.

    1. Every team gets what it asks, up to its guarantee.
    2. What is left is shared by weight among the teams that still ask (water-filling: a team
       that needs less than its weighted part gives the rest back to the others).
    3. Nobody passes its limit. Fractions are kept: this is a yardstick, not an allocation.
    """
    entitled: dict[str, float] = {}
    ceiling: dict[str, float] = {}
    for team, d in demand.items():
        q = quotas.get(team)
        if q is None or d <= 0:
            continue
        entitled[team] = min(d, q.guarantee)
        ceiling[team] = min(d, q.limit)
    left = capacity - sum(entitled.values())
    active = {t for t in entitled if ceiling[t] > entitled[t]}
    while left > 1e-9 and active:
        total_weight = sum(quotas[t].weight for t in active) or 1.0
        spent = 0.0
        for t in sorted(active):
            part = left * quotas[t].weight / total_weight
            give = min(part, ceiling[t] - entitled[t])
            entitled[t] += give
            spent += give
        left -= spent
        active = {t for t in active if ceiling[t] - entitled[t] > 1e-9}
        if spent <= 1e-9:
            break
    return entitled


def jain(values: Sequence[float]) -> float:
    """Jain's index: 1 when all values are equal, 1/n when one takes everything."""
    if not values:
        return 1.0
    square_of_sum = sum(values) ** 2
    sum_of_squares = sum(v * v for v in values)
    return square_of_sum / (len(values) * sum_of_squares) if sum_of_squares > 0 else 1.0
