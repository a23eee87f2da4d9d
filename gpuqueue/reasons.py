"""Pending reasons, stored as data by the cycle, turned into one sentence with numbers.

The API and the dashboard both call `describe_reason`; the engine never writes prose.
"""

from __future__ import annotations

from typing import Any


def _n(numbers: dict[str, Any], key: str, default: Any = "?") -> Any:
    return numbers.get(key, default)


def describe_reason(reason: dict[str, Any] | None, *, team: str = "", flavor: str = "") -> str:
    if not reason:
        return "Waiting for the next admission cycle."
    code = reason.get("code", "")
    n: dict[str, Any] = reason.get("numbers") or {}
    jobs = reason.get("job_ids") or []
    flavor = str(n.get("flavor", flavor))
    if code == "over_limit":
        return (
            f"Over the team's limit: {team or 'the team'} uses {_n(n, 'in_use')} of its "
            f"{_n(n, 'limit')} {flavor} GPUs and this job asks for {_n(n, 'requested')}."
        )
    if code == "no_quota":
        return f"The team has no quota for {flavor} GPUs."
    if code == "no_capacity":
        return (
            f"Waiting for {_n(n, 'gpus', '?')} {flavor} GPUs as {_n(n, 'workers')} × "
            f"{_n(n, 'gpus_per_worker')}; {_n(n, 'workers_fit_now')} of {_n(n, 'workers')} "
            f"workers fit now; {_n(n, 'free')} GPUs free."
        )
    if code == "over_fair_share":
        return (
            f"Over the team's fair share of {flavor}: {_n(n, 'in_use')} in use, fair share "
            f"{_n(n, 'fair_share')}, guarantee {_n(n, 'guarantee')}; non-preemptible work may only "
            "use the guarantee."
        )
    if code == "waiting_for_preemption":
        return (
            f"Waiting for {len(jobs)} preempted job{'s' if len(jobs) != 1 else ''} "
            f"({', '.join(f'#{j}' for j in jobs)}) to checkpoint and release their GPUs."
        )
    if code == "behind_reservation":
        return (
            f"Behind a reservation for starving job #{jobs[0] if jobs else '?'}, which holds "
            f"{_n(n, 'reserved')} {flavor} GPUs until it starts."
        )
    if code == "queued_behind_team":
        return f"Queued behind {_n(n, 'ahead')} earlier jobs of the team."
    if code == "never_fits":
        return (
            f"Can never start: a worker needs {_n(n, 'gpus_per_worker')} {flavor} GPUs and the "
            f"largest node has {_n(n, 'largest_node')}."
        )
    return f"Pending ({code})."
