"""Pure drawing arithmetic for server-rendered SVG: quota bars, time-series charts, team colours.

No Django here: numbers in, coordinates out, so every rule is testable on its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

# Colour-blind-safe palette (Okabe–Ito, without black and yellow, which read poorly on white).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#7F3C8D", "#11A579")
FREE_COLOUR = "#e8ebf0"
EXTERNAL_COLOUR = "#9aa1ad"


def team_colours(slugs: Sequence[str]) -> dict[str, str]:
    """A stable colour per team: by position in the sorted slugs, so a team keeps its colour
    on every page as long as no team is added before it."""
    return {slug: PALETTE[i % len(PALETTE)] for i, slug in enumerate(sorted(set(slugs)))}


def _pct(value: float, scale: float) -> float:
    if scale <= 0:
        return 0.0
    return round(max(0.0, min(value, scale)) * 100 / scale, 2)


@dataclass(frozen=True, slots=True)
class QuotaBar:
    """One team × flavor bar, all in percent of the flavor's common scale.

    [0, within) allocated inside the guarantee, [within, within+borrowed) allocated above it,
    then pending; markers at the guarantee, the fair share and the limit.
    """

    within: float
    borrowed: float
    pending: float
    guarantee: float
    fair_share: float
    limit: float

    @property
    def borrowed_x(self) -> float:
        return self.within

    @property
    def pending_x(self) -> float:
        return round(self.within + self.borrowed, 2)


def quota_bar(
    *, guarantee: int, limit: int, fair_share: int, allocated: int, pending: int, scale: int
) -> QuotaBar:
    """Bar geometry; `scale` is shared by the flavor's rows so that their lengths compare."""
    within = min(allocated, guarantee)
    borrowed = max(allocated - guarantee, 0)
    end_alloc = _pct(allocated, scale)
    within_pct = _pct(within, scale)
    return QuotaBar(
        within=within_pct,
        borrowed=round(end_alloc - within_pct, 2) if borrowed else 0.0,
        pending=round(_pct(allocated + pending, scale) - end_alloc, 2),
        guarantee=_pct(guarantee, scale),
        fair_share=_pct(fair_share, scale),
        limit=_pct(limit, scale),
    )


def bar_scale(rows: Sequence[tuple[int, int, int, int]]) -> int:
    """The common scale of a flavor's bars from (limit, fair share, allocated, pending) rows:
    the longest thing to draw, so nothing is clipped unless a limit is absurd; at least 1."""
    longest = 0
    for limit, fair_share, allocated, pending in rows:
        longest = max(longest, limit, fair_share, allocated + pending)
    return max(longest, 1)


# --- Time-series charts -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True, slots=True)
class Area:
    name: str
    colour: str
    path: str


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    areas: tuple[Area, ...]
    capacity_path: str
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    y_max: int
    empty: bool


WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 40, 630, 10, 175


def _x(t: datetime, start: datetime, end: datetime) -> float:
    span = (end - start).total_seconds() or 1.0
    return round(LEFT + (t - start).total_seconds() / span * (RIGHT - LEFT), 1)


def _y(value: float, y_max: int) -> float:
    return round(BOTTOM - value / y_max * (BOTTOM - TOP), 1)


def step_path(points: Sequence[tuple[float, float]]) -> str:
    """An SVG path through (x, y) points, drawn as steps: a sample holds until the next."""
    if not points:
        return ""
    parts = [f"M{points[0][0]},{points[0][1]}"]
    for (_, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if y1 != y0:
            parts.append(f"H{x1}V{y1}")
        else:
            parts.append(f"H{x1}")
    return "".join(parts)


def band_path(upper: Sequence[tuple[float, float]], lower: Sequence[tuple[float, float]]) -> str:
    """A closed area between two step lines with the same x positions."""
    if not upper:
        return ""
    back = list(reversed(lower))
    top = step_path(upper)
    bottom = step_path(back)[1:]  # drop the "M": continue the outline
    return f"{top}L{bottom}Z"


def time_ticks(start: datetime, end: datetime) -> tuple[Tick, ...]:
    """Round times across the window: 10 minutes for an hour, 4 hours for a day, days for a
    week; labels in UTC like the rest of the service."""
    span = end - start
    if span <= timedelta(hours=2):
        step, fmt = timedelta(minutes=10), "%H:%M"
    elif span <= timedelta(days=2):
        step, fmt = timedelta(hours=4), "%H:%M"
    else:
        step, fmt = timedelta(days=1), "%a %d"
    seconds = int(step.total_seconds())
    first = datetime.fromtimestamp(
        (int(start.timestamp()) // seconds + 1) * seconds, tz=start.tzinfo
    )
    ticks = []
    t = first
    while t <= end:
        ticks.append(Tick(_x(t, start, end), t.strftime(fmt)))
        t += step
    return tuple(ticks)


def stacked_chart(
    times: Sequence[datetime],
    capacity: Sequence[float],
    stacks: Sequence[tuple[str, str, Sequence[float]]],
    start: datetime,
    end: datetime,
) -> Chart:
    """Allocated GPUs stacked by team (name, colour, values at `times`) under the capacity line.

    Each band is drawn between the running total below it and the total including it.
    """
    totals = [sum(values[i] for _, _, values in stacks) for i in range(len(times))]
    # The axis ends at the capacity (or at the allocation when it is higher, as when nodes
    # left): 64 GPUs fill the chart's height, not 64 % of an axis rounded up to 100.
    y_max = math.ceil(max([*capacity, *totals, 1]))
    xs = [_x(t, start, end) for t in times]
    # Every sample holds for its interval: extend the last one to the window's end.
    xs_ext = [*xs, float(RIGHT)] if xs else []
    areas = []
    below = [0.0] * len(times)
    for name, colour, values in stacks:
        above = [below[i] + values[i] for i in range(len(times))]
        if any(values):
            upper = [(x, _y(v, y_max)) for x, v in zip(xs_ext, [*above, *above[-1:]], strict=False)]
            lower = [(x, _y(v, y_max)) for x, v in zip(xs_ext, [*below, *below[-1:]], strict=False)]
            areas.append(Area(name, colour, band_path(upper, lower)))
        below = above
    cap_points = [
        (x, _y(v, y_max)) for x, v in zip(xs_ext, [*capacity, *capacity[-1:]], strict=False)
    ]
    y_ticks = tuple(Tick(_y(v, y_max), str(v)) for v in sorted({0, y_max // 2, y_max}))
    return Chart(
        WIDTH,
        HEIGHT,
        LEFT,
        RIGHT,
        TOP,
        BOTTOM,
        tuple(areas),
        step_path(cap_points),
        time_ticks(start, end),
        y_ticks,
        y_max,
        empty=not times,
    )


# --- The cluster map ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Share:
    """A fractional job's worker on a shared GPU: its team, its job (None: not the viewer's
    to see) and its thousandths of the GPU."""

    team: str
    job_id: int | None
    milli: int


@dataclass(frozen=True, slots=True)
class Cell:
    """One GPU of a node: who holds it (a team slug, "external" or None for free), or the
    workers of fractional jobs sharing it (`shares`)."""

    team: str | None
    job_id: int | None = None
    shares: tuple[Share, ...] = ()

    @property
    def milli(self) -> int:
        """Thousandths of the GPU held: 1000 when it is held whole, 0 when free."""
        if self.shares:
            return min(sum(s.milli for s in self.shares), 1000)
        return 0 if self.team is None else 1000


def node_cells(
    gpus: int,
    holders: Sequence[tuple[str, int | None, int]],
    external: int,
    shared: Sequence[Sequence[Share]] = (),
) -> list[Cell]:
    """The GPUs of one node in a fixed order: each holder's (team, job, GPUs) in turn, then
    the GPUs fractional jobs share (`shared`: each GPU's shares), then GPUs used outside
    gpuqueue, then free ones. More holders than GPUs (a stale row) are cut."""
    cells: list[Cell] = []
    for team, job_id, count in holders:
        cells.extend(Cell(team, job_id) for _ in range(count))
    cells.extend(Cell(None, shares=tuple(shares)) for shares in shared if shares)
    cells.extend(Cell("external") for _ in range(external))
    cells = cells[:gpus]
    cells.extend(Cell(None) for _ in range(gpus - len(cells)))
    return cells


def shared_gpus(
    devices: Sequence[tuple[int, Share]], workers: Sequence[Share], gpus: int
) -> list[list[Share]]:
    """The shares of each shared GPU of a node, by GPU index: the workers whose index the
    cycle stored (`devices`), then workers without one (admitted before indices were kept),
    each on the first GPU with room for it."""
    by_index: dict[int, list[Share]] = {}
    for index, share in devices:
        by_index.setdefault(index, []).append(share)
    for share in workers:
        index = next(
            (
                i
                for i in range(gpus)
                if sum(s.milli for s in by_index.get(i, [])) + share.milli <= 1000
            ),
            0,
        )
        by_index.setdefault(index, []).append(share)
    return [by_index[i] for i in sorted(by_index)]


FREE_COLOUR = "#e8ebf0"  # as .gpu-free


def share_fill(cell: Cell, colours: Mapping[str, str]) -> str:
    """A shared GPU's background: each share in its team's colour from the bottom, as high as
    its thousandths, the rest free."""
    stops: list[str] = []
    low = 0.0
    for share in cell.shares:
        high = min(low + share.milli / 10, 100.0)
        stops.append(f"{colours.get(share.team, '#888')} {low:g}% {high:g}%")
        low = high
    stops.append(f"{FREE_COLOUR} {low:g}% 100%")
    return f"linear-gradient(to top, {', '.join(stops)})"


def share_title(cell: Cell) -> str:
    """Who holds how much of a shared GPU, in words."""
    parts = [
        f"{s.team}{f' · job #{s.job_id}' if s.job_id is not None else ''}: {s.milli}/1000"
        for s in cell.shares
    ]
    return f"shared GPU, {cell.milli}/1000 in use ({'; '.join(parts)})"
