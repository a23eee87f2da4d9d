"""The runtime prediction and the estimated start's band as sentences, for the CLI and the job
page alike (standard library only; the API gives both as data: `runtime_prediction`,
`start_band`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gpuqueue.client.humane import parse, relative, span

# Where a prediction came from (gpuqueue/scheduler/prediction.py's levels).
SOURCES = {
    "user_name": "finished jobs of the same user and name",
    "user_image": "finished jobs of the same user and image",
    "team_shape": "finished jobs of the same team and shape",
    "flavor_shape": "finished jobs of the same flavor and shape",
    "flavor": "finished jobs of the same flavor and size",
}


def runtime_text(prediction: dict[str, Any] | None) -> str:
    """'about 50 min (10-90 %: 34 min to 1 h 06 min), from 5 finished jobs of the same user and
    name'; 'declared: 15 min'; '' for none."""
    if not prediction:
        return ""
    if prediction.get("source") == "declared":
        return f"declared: {span(prediction['p50'])}"
    origin = SOURCES.get(prediction.get("source", ""), prediction.get("source", ""))
    samples = prediction.get("samples", 0)
    origin = origin.replace("finished jobs", f"{samples} finished job{'s' if samples != 1 else ''}")
    return (
        f"about {span(prediction['p50'])} (10-90 %: {span(prediction['p10'])} to "
        f"{span(prediction['p90'])}), from {origin}"
    )


def band_text(band: dict[str, Any] | None, now: datetime) -> str:
    """'between 2026-11-24 14:20 and 2026-11-24 16:05 UTC (in 1 h 10 min to 2 h 55 min),
    10-90 %'; one time when the band is under a minute wide; 'not before …; no late bound'
    past the forecast's horizon; the reason there is no estimate; or '' when nothing is known
    yet. Times in UTC, as the page prints them."""
    if not band:
        return ""
    if band.get("why_none_text"):
        return str(band["why_none_text"])
    early, late = parse(band.get("early")), parse(band.get("late"))
    if early is None:
        return ""
    if late is None:
        return f"not before {early:%H:%M} UTC ({relative(early, now)}); no late bound"
    if late - early < timedelta(minutes=1):
        return f"{early:%H:%M} UTC ({relative(early, now)})"
    return (
        f"between {early:%Y-%m-%d %H:%M} and {late:%Y-%m-%d %H:%M} UTC "
        f"({relative(early, now)} to {relative(late, now).removeprefix('in ')}), 10-90 %"
    )
