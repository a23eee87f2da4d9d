"""How evenly entitlements were met. What each team is entitled to at a moment is the
engine's own max-min fair share with fractions kept (`scheduler.usage.entitled_shares`)."""

from __future__ import annotations

from collections.abc import Sequence


def jain(values: Sequence[float]) -> float:
    """Jain's index: 1 when all values are equal, 1/n when one takes everything."""
    if not values:
        return 1.0
    square_of_sum = sum(values) ** 2
    sum_of_squares = sum(v * v for v in values)
    return square_of_sum / (len(values) * sum_of_squares) if sum_of_squares > 0 else 1.0
