"""Writing results down: the comparison table in Markdown and the plots (matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuqueue.sim.simulator import Result

COLUMNS = (
    ("policy", "policy", "{}"),
    ("gpus", "GPUs", "{}"),
    ("load", "load", "{:.0%}"),
    ("delay_mean_s", "mean delay (h)", "h"),
    ("delay_median_s", "median delay (h)", "h"),
    ("delay_p95_s", "p95 delay (h)", "h"),
    ("delay_max_s", "max delay (h)", "h"),
    ("delay_work_weighted_mean_s", "work-weighted mean delay (h)", "h"),
    ("jct_mean_s", "mean JCT (h)", "h"),
    ("makespan_s", "makespan (d)", "d"),
    ("alloc_mean", "mean alloc", "{:.1%}"),
    ("gpu_hours_idle_in_gangs", "GPU-h idle in gangs", "{:,.0f}"),
    ("jobs_held_incomplete", "gangs held incomplete", "{}"),
    ("preemptions", "preemptions", "{}"),
    ("gpu_hours_lost", "GPU-h lost", "{:,.0f}"),
    ("jain", "Jain", "{:.3f}"),
    ("jain_major_teams", "Jain (teams ≥1 %)", "{:.3f}"),
    ("guarantee_violation_team_hours", "guarantee violation (team-h)", "{:,.0f}"),
    ("jobs_finished", "finished", "{}"),
    ("wall_s", "wall (s)", "{:.1f}"),
)


def _cell(value: object, fmt: str) -> str:
    if value is None:
        return "–"
    if fmt == "h":
        return f"{float(value) / 3600:,.2f}"  # type: ignore[arg-type]
    if fmt == "d":
        return f"{float(value) / 86400:,.1f}"  # type: ignore[arg-type]
    return fmt.format(value)


def markdown_table(rows: Sequence[dict[str, object]]) -> str:
    head = "| " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = [
        "| " + " | ".join(_cell(row.get(key), fmt) for key, _, fmt in COLUMNS) + " |"
        for row in rows
    ]
    return "\n".join([head, rule, *body]) + "\n"


PLOTS_MISSING = (
    "matplotlib is not installed: the table and the results are written, the plots are not "
    "(pip install 'gpuqueue[plots]' for them)"
)


def can_plot() -> bool:
    """Whether matplotlib, an optional extra, is importable; asked before any replay runs, so a
    long comparison never computes everything and then dies on the import."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_runs(results: Sequence[Result], title: str, path: Path) -> None:
    """Two panels over virtual time (days): GPUs allocated (% of the cluster), jobs pending."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    for result in results:
        s = result.series
        days = [t / 86400 for t in s.time]
        gpus = float(result.summary["gpus"])  # type: ignore[arg-type]
        top.plot(days, [100 * a / gpus for a in s.allocated], lw=0.7, label=result.policy)
        bottom.plot(days, s.pending_jobs, lw=0.7, label=result.policy)
    top.set_ylabel("GPUs allocated (%)")
    top.set_ylim(0, 105)
    bottom.set_ylabel("jobs pending")
    bottom.set_yscale("symlog")
    bottom.set_xlabel("days since the first submission")
    top.legend(loc="lower right", fontsize=8)
    top.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
