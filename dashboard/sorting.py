"""The job list's column headers: which columns sort (by the API's `ordering` keys), the link
each header carries and what it tells a screen reader (aria-sort)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuqueue.core.job_order import Ordering

# Biggest first for amounts and times: the column a researcher clicks to find the longest
# wait or the hungriest job; names and places in line A to Z, 1 to n.
DESCENDING_FIRST = ("id", "gpus", "priority", "submitted_at", "waited", "ran", "gpu_hours")


@dataclass(frozen=True)
class Column:
    label: str
    key: str | None = None  # an ordering key; None: the column does not sort
    title: str = ""


COLUMNS = (
    Column("#", "id"),
    Column("Name", "name"),
    Column("Team", "team"),
    Column("User", "user"),
    Column("Shape", "gpus", "workers × GPUs per worker; sorts by the GPUs in all"),
    Column("State", "state"),
    Column("Position", "position", "place in the cluster's queue"),
    Column("Why it waits"),
    Column("Estimated start"),
    Column("Submitted", "submitted_at"),
    Column("Waited", "waited", "from submission to start, or so far"),
    Column("Ran", "ran", "since it started, until it ended"),
    Column("GPU-h", "gpu_hours", "GPUs × time held"),
)


@dataclass(frozen=True)
class Header:
    label: str
    title: str
    ordering: str  # the ordering a click asks for; "" when the column does not sort
    aria_sort: str  # "ascending" / "descending" on the sorted column, else ""


def headers(current: Ordering) -> list[Header]:
    """A click on the sorted column reverses it; on another, sorts by it in its first way."""
    out = []
    for column in COLUMNS:
        if column.key is None:
            out.append(Header(column.label, column.title, "", ""))
            continue
        if column.key == current.key:
            wanted = current.reversed
            aria = "descending" if current.descending else "ascending"
        else:
            wanted = Ordering(column.key, column.key in DESCENDING_FIRST)
            aria = ""
        out.append(Header(column.label, column.title, str(wanted), aria))
    return out
