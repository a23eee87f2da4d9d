"""Times and rows for people at a terminal (standard library only): the API's machine times
become the viewer's local time with how far off it is, and jobs become squeue-like rows."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any


def parse(value: str | None) -> datetime | None:
    """An RFC 3339 time of the API (…Z or with an offset); None for none."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def span(seconds: float) -> str:
    """12 s, 4 min, 3 h 05 min, 2 d 4 h."""
    seconds = abs(int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        hours, minutes = divmod(seconds // 60, 60)
        return f"{hours} h {minutes:02d} min" if minutes else f"{hours} h"
    return f"{seconds // 86400} d {(seconds % 86400) // 3600} h"


def relative(at: datetime, now: datetime) -> str:
    """'now', 'in 4 min' or '3 h 05 min ago'."""
    delta = (at - now).total_seconds()
    if abs(delta) < 5:
        return "now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def when(value: str | None, now: datetime) -> str:
    """'2026-11-24 15:32 CET (in 12 min)' in the viewer's time zone; '' for none."""
    at = parse(value)
    if at is None:
        return ""
    local = at.astimezone()
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()} ({relative(at, now)})"


def shape(job: dict[str, Any]) -> str:
    """'2×8 h100': workers × GPUs per worker, and the flavor; '2×0.25 h100-shared' for a
    fraction of one GPU per worker; '1×1+3×8 h100' for pod sets of different GPUs per pod (a
    user's PyTorchJob or RayJob)."""
    if job.get("pod_sets"):
        sets = "+".join(f"{s['pods']}×{s['gpus']}" for s in job["pod_sets"])
        return f"{sets} {job['flavor']}"
    return f"{job['workers']}×{per_worker(job)} {job['flavor']}"


def per_worker(job: dict[str, Any]) -> str:
    """A worker's GPUs: '8', or '0.25' for a fraction of one."""
    if job.get("gpu_milli"):
        return f"{job['gpu_milli'] / 1000:g}"
    return str(job["gpus_per_worker"])


def gpus_text(job: dict[str, Any]) -> str:
    """'16 h100 GPUs', or '0.5 of shared h100-shared GPUs' for fractions."""
    if job.get("gpu_milli"):
        return f"{job['workers'] * job['gpu_milli'] / 1000:g} of shared {job['flavor']} GPUs"
    return f"{job['gpus']} {job['flavor']} GPUs"


def elapsed(job: dict[str, Any], now: datetime) -> str:
    """How long it has waited (pending) or run (since it started): squeue's TIME."""
    if job["state"] == "PENDING":
        start = parse(job.get("submitted_at"))
    else:
        start = parse(job.get("started_at")) or parse(job.get("admitted_at"))
    if start is None:
        return ""
    end = parse(job.get("finished_at")) or now
    return span(max((end - start).total_seconds(), 0))


QUEUE_COLUMNS = ("ID", "TEAM", "USER", "STATE", "SHAPE", "TIME", "POS", "START", "NAME", "WHY")


def clock(at: datetime, now: datetime) -> str:
    """'14:05' in the viewer's time zone, '+1d' when a day or more away."""
    return f"{at.astimezone():%H:%M}" + (
        f" +{(at - now).days}d" if at - now >= timedelta(days=1) else ""
    )


def array_counts(counts: dict[str, int]) -> str:
    """'2 running, 8 pending, 1 failed' (admitted and preempting count as running)."""
    held = sum(counts.get(s, 0) for s in ("ADMITTED", "RUNNING", "PREEMPTING"))
    parts = [f"{held} running"] if held else []
    parts += [
        f"{counts[s]} {s.lower()}"
        for s in ("PENDING", "SUCCEEDED", "FAILED", "CANCELLED")
        if counts.get(s)
    ]
    return ", ".join(parts)


def array_row(job: dict[str, Any], now: datetime) -> tuple[str, ...]:
    """One row for a whole array, as squeue shows `123_[10-99%10]`: its waiting tasks' indices
    and limit, the next start, its tasks counted and when the last should end."""
    a = job["array_summary"]
    start = parse(a.get("next_start"))
    finish = parse(a.get("estimated_finish"))
    why = array_counts(a["counts"])
    if a.get("max_concurrent"):
        why += f"; {a['max_concurrent']} at a time"
    if finish is not None:
        why += f"; done ~{clock(finish, now)}"
    return (
        a["label"],
        job["team"],
        job["user"],
        a["state"],
        f"{a['size']}×{shape(job)}",
        "",
        "",
        "" if start is None else clock(start, now),
        job["name"],
        why,
    )


def queue_rows(jobs: list[dict[str, Any]], now: datetime) -> list[tuple[str, ...]]:
    """One row per job: what squeue shows, plus gpuqueue's position, estimated start and reason;
    one row per array (the rows the API gives with `array_summary`)."""
    rows = []
    for job in jobs:
        if job.get("array_summary"):
            rows.append(array_row(job, now))
            continue
        position = ""
        if job["state"] == "PENDING" and job.get("queue_position") is not None:
            position = f"{job['queue_position']}/{job.get('cluster_position')}"
        start = parse(job.get("estimated_start")) if job["state"] == "PENDING" else None
        rows.append(
            (
                str(job["id"]),
                job["team"],
                job["user"],
                job["state"],
                shape(job),
                elapsed(job, now),
                position,
                "" if start is None else clock(start, now),
                job["name"],
                job.get("pending_reason_label") or "",
            )
        )
    return rows


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Columns as wide as their widest cell; the last one is left as long as it is."""
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(len(header))]
    lines = []
    for cells in [header, *rows]:
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
        lines.append("  ".join([*padded, cells[-1]]).rstrip())
    return "\n".join(lines)
