"""The queue overview: per flavor and team, guarantee, limit, fair share, allocated, borrowed,
pending, and the team's time-based fair share balance (owed or in debt). Aggregates only (no
job details), so every signed-in user may read all teams: fair share is only meaningful next
to the others'."""

from __future__ import annotations

from dataclasses import dataclass, field

from dashboard.geometry import QuotaBar, bar_scale, quota_bar, team_colours
from gpuqueue.services.cluster.inventory import usage_now
from teams.models import Team


@dataclass(frozen=True)
class TeamRow:
    team: str
    colour: str
    guarantee: int
    limit: int
    weight: float
    fair_share: int
    allocated: int
    borrowed: int
    pending: int
    pending_jobs: int
    running_jobs: int
    bar: QuotaBar
    balance_gpu_hours: float | None = None

    @property
    def balance(self) -> str:
        """The balance in words: "12.5 GPU-h owed", "3.0 GPU-h in debt", "even" or "—"."""
        return balance_label(self.balance_gpu_hours)


@dataclass(frozen=True)
class FlavorOverview:
    flavor: str
    capacity: int
    schedulable_capacity: int
    allocated: int
    pending: int
    rows: list[TeamRow] = field(default_factory=list)

    @property
    def utilization(self) -> int:
        return round(self.allocated * 100 / self.capacity) if self.capacity else 0


def balance_label(hours: float | None) -> str:
    if hours is None:
        return "—"
    if abs(hours) < 0.05:
        return "even"
    return f"{abs(hours):,.1f} GPU-h {'owed' if hours > 0 else 'in debt'}"


def borrowed_gpus(allocated: int, guarantee: int) -> int:
    """GPUs a team holds above its guarantee: lent from idle capacity, reclaimable."""
    return max(allocated - guarantee, 0)


def queue_overview() -> list[FlavorOverview]:
    """Usage per flavor and team with the fair shares and balances the last admission cycle
    stored (the numbers it admitted by), as bars on one scale per flavor."""
    usage = usage_now()
    colours = team_colours(list(Team.objects.values_list("slug", flat=True)))
    out = []
    for flavor in usage:
        raw = []
        for t in flavor.teams:
            if t.guarantee is None and not t.allocated and not t.pending_gpus:
                continue
            raw.append((t, t.fair_share or 0))
        scale = bar_scale([(t.limit or 0, share, t.allocated, t.pending_gpus) for t, share in raw])
        rows = [
            TeamRow(
                team=t.team,
                colour=colours[t.team],
                guarantee=t.guarantee or 0,
                limit=t.limit or 0,
                weight=t.weight or 0.0,
                fair_share=share,
                allocated=t.allocated,
                borrowed=borrowed_gpus(t.allocated, t.guarantee or 0),
                pending=t.pending_gpus,
                pending_jobs=t.pending_jobs,
                running_jobs=t.running_jobs,
                bar=quota_bar(
                    guarantee=t.guarantee or 0,
                    limit=t.limit or 0,
                    fair_share=share,
                    allocated=t.allocated,
                    pending=t.pending_gpus,
                    scale=scale,
                ),
                balance_gpu_hours=t.share_balance_gpu_hours,
            )
            for t, share in raw
        ]
        out.append(
            FlavorOverview(
                flavor.flavor,
                flavor.capacity,
                flavor.schedulable_capacity,
                flavor.allocated,
                flavor.pending_gpus,
                rows,
            )
        )
    return out
