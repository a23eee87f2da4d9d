"""Pending reasons, stored as data by the cycle, turned into one sentence with numbers.

The API and the dashboard both call `describe_reason`; the engine never writes prose. The numbers
each code carries are listed in gpuqueue/scheduler/reasons.py, but for the one code the engine
never gives, because a job with it is not in the cycle's snapshot:

| code        | numbers                                                                        |
| ----------- | ------------------------------------------------------------------------------ |
| backing_off | until (epoch seconds), wait_seconds, start_failures, max_start_attempts, cause |

(written by gpuqueue/services/jobs/start_failures.py when a job's pods could not be started; the
first cycle after `until` replaces it with the engine's reason).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

BACKING_OFF = "backing_off"
# Written by the cycle's hold phase on jobs it keeps out of the snapshot (gpuqueue/services/
# dependencies.py and arrays.py): numbers empty, `waits` [[job id, kind, state], ...]; or
# numbers {array, limit}.
DEPENDENCIES = "dependencies"
DEPENDENCY_UNMET = "dependency_unmet"
ARRAY_LIMIT = "array_limit"
_AWAITED = {
    "after_ok": "to succeed",
    "after_any": "to end",
    "after_not_ok": "to fail or be cancelled",
}


def _plural(count: Any, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def when(timestamp: Any, *, seconds: bool = False) -> str:
    if not isinstance(timestamp, int | float):
        return "an unknown time"
    shape = "%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC"
    return datetime.fromtimestamp(timestamp, tz=UTC).strftime(shape)


def _duration(seconds: Any) -> str:
    """'30 min', '2.5 h'."""
    if not isinstance(seconds, int | float):
        return "their minimum runtime"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{seconds / 3600:.1f} h"


def _gpu_hours(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    return f"{seconds / 3600:,.1f}"


def _scope(n: dict[str, Any]) -> str:
    return "department's" if n.get("scope") == "department" else "team's"


def _beyond_share(n: dict[str, Any], flavor: str, gpus: Any) -> str:
    """What a job waiting for capacity must wait for when it would take its team past its fair
    share (gpuqueue/scheduler/reasons.py, NO_CAPACITY); '' otherwise."""
    share, in_use, newer = n.get("fair_share"), n.get("team_in_use"), n.get("newer_gpus")
    if not isinstance(share, int) or not isinstance(in_use, int):
        return ""
    if isinstance(gpus, int) and gpus > share:
        return (
            f" It is larger than its team's fair share of {share} {flavor} GPUs, so it can "
            f"start only on GPUs that other teams leave free."
        )
    held = f" Its team holds {in_use} {flavor} GPUs against a fair share of {share}"
    if isinstance(newer, int) and newer > 0:
        held += (
            f", {newer} of them in jobs that started after this one was submitted (a team's "
            f"other jobs start whenever they fit)"
        )
    return (
        f"{held}: this job can start within the share only once the team's running jobs "
        f"leave {gpus} of its GPUs free together, or on GPUs that other teams leave free."
    )


# A word per reason for lists and the CLI's WHY column, as Slurm's squeue shows `Resources`,
# `Priority` or `Dependency`; the job page and `gpuqueue status` give the whole sentence.
LABELS = {
    "no_capacity": "Resources",
    "queued_behind_team": "TeamQueue",
    "over_limit": "Limit",
    "no_quota": "NoQuota",
    "over_fair_share": "Guarantee",
    "in_share_debt": "FairShare",
    "waiting_for_reclaim": "Reclaim",
    "waiting_for_preemption": "Preempting",
    "behind_reservation": "Priority",
    "reserved": "Reserved",
    "never_fits": "NeverFits",
    "held_for_older": "OlderTeamJob",
    "no_domain": "Topology",
    BACKING_OFF: "BackOff",
    DEPENDENCIES: "Dependency",
    DEPENDENCY_UNMET: "DependencyNeverMet",
    ARRAY_LIMIT: "ArrayLimit",
}


def reason_label(reason: dict[str, Any] | None) -> str:
    """The reason's word ("Resources", "Limit", …): "Cycle" before the first plan. A limit the
    job alone exceeds can never be met, which the word says too."""
    if not reason:
        return "Cycle"
    code = reason.get("code", "")
    numbers = reason.get("numbers") or {}
    if code == "over_limit":
        limit, requested = numbers.get("limit"), numbers.get("requested")
        if isinstance(limit, int) and isinstance(requested, int) and requested > limit:
            return "NeverUnderLimit"
    if _blocked_by_newer(code, numbers):
        return NEWER_TEAM_JOBS
    return LABELS.get(code, "Pending")


# A job whose room its own team's newer jobs hold (the engine's `newer_gpus`).
NEWER_TEAM_JOBS = "NewerTeamJobs"


def _blocked_by_newer(code: str, n: dict[str, Any]) -> bool:
    """Whether the team's jobs started since this one hold the room it waits for: without
    them it would be within its team's limit (over_limit) or fair share (no_capacity)."""
    newer = n.get("newer_gpus")
    if not isinstance(newer, int) or newer <= 0:
        return False
    if code == "over_limit":
        bound, in_use = n.get("limit"), n.get("in_use")
        asked = n.get("requested")
    elif code in ("no_capacity", "queued_behind_team"):
        bound, in_use = n.get("fair_share"), n.get("team_in_use")
        workers, per = n.get("workers"), n.get("gpus_per_worker")
        asked = workers * per if isinstance(workers, int) and isinstance(per, int) else None
    else:
        return False
    if not all(isinstance(v, int) for v in (bound, in_use, asked)):
        return False
    return in_use - newer + asked <= bound and asked > bound - in_use


def describe_reason(reason: dict[str, Any] | None) -> str:
    """One sentence with the numbers, e.g. 'Waiting for 8 h100 GPUs as 4 × 2; 3 of 4 workers
    fit now; 6 GPUs free.'"""
    if not reason:
        return "Waiting for the next admission cycle."
    code = reason.get("code", "")
    n: dict[str, Any] = reason.get("numbers") or {}
    jobs = reason.get("job_ids") or []
    flavor = n.get("flavor", "")
    workers, per = n.get("workers", "?"), n.get("gpus_per_worker", "?")
    gpus = workers * per if isinstance(workers, int) and isinstance(per, int) else "?"
    shape = f"{gpus} {flavor} GPUs as {workers} × {per}"
    milli, models = n.get("gpu_milli") or 0, n.get("gpu_models") or ""
    if milli:
        shape = f"{workers} × {milli} thousandths of one {flavor} GPU"
    if models:
        shape += f" of model {models}"
    if code == "over_limit":
        limit, requested = n.get("limit"), n.get("requested")
        if isinstance(limit, int) and isinstance(requested, int) and requested > limit:
            return (
                f"Can never start under the {_scope(n)} limit: the job asks for {requested} "
                f"{flavor} GPUs and the limit is {limit}; ask an admin to raise it."
            )
        sentence = (
            f"Over the {_scope(n)} limit: {n.get('in_use')} of {limit} {flavor} GPUs "
            f"in use and this job asks for {requested}."
        )
        newer = n.get("newer_gpus")
        if isinstance(newer, int) and newer > 0:
            sentence += (
                f" {newer} of them are held by the team's jobs started since this one was "
                f"submitted; it has waited longest, so the team's newer jobs now start only "
                f"while they leave it room."
            )
        return sentence
    if code == "no_quota":
        return f"The {_scope(n)} quota has no {flavor} GPUs."
    if code == "over_fair_share":
        return (
            f"Non-preemptible work may only use the {_scope(n)} guarantee: {n.get('in_use')} of "
            f"{n.get('guarantee')} {flavor} GPUs in use and this job asks for {n.get('requested')}."
        )
    if code == "in_share_debt":
        recovers, share, in_use = n.get("recovers_at"), n.get("fair_share"), n.get("in_use")
        holds = min(share, in_use) if isinstance(share, int) and isinstance(in_use, int) else share
        outlook = (
            f"It should be back under that by {when(recovers)} if the team holds no more "
            f"than {holds} {flavor} GPUs until then."
            if isinstance(recovers, int | float)
            else "It is not expected to fall under that."
        )
        guaranteed = n.get("guaranteed_team")
        why = (
            f"none while another team waits for GPUs within its guarantee, as team "
            f"{guaranteed} does now"
            if guaranteed
            else "they have no room for this job"
        )
        return (
            f"The team has used {_gpu_hours(n.get('debt_seconds'))} {flavor} GPU-hours more "
            f"than its fair share lately (older use counts less and less), and a team more than "
            f"{_gpu_hours(n.get('threshold_seconds'))} GPU-hours in debt borrows beyond its "
            f"fair share of {n.get('fair_share')} only free GPUs of nodes already in use, and "
            f"{why}: {n.get('in_use')} in use and this job asks for "
            f"{n.get('requested')}. {outlook}"
        )
    if code in ("no_capacity", "queued_behind_team"):
        sentence = (
            f"Waiting for {shape}; {n.get('workers_fit', 0)} of {workers} workers fit now; "
            f"{_plural(n.get('free', 0), 'GPU')} free."
        )
        if milli:
            sentence += f" The most free on one GPU: {n.get('most_gpu_room', 0)} thousandths."
        if code == "queued_behind_team":
            sentence += f" Queued behind {_plural(n.get('ahead'), 'earlier job')} of the team."
        return (
            sentence
            + _short_node(n)
            + _beyond_share(n, flavor, gpus)
            + _guarantee_blocked(n, flavor)
        )
    if code == "waiting_for_reclaim":
        teams = str(n.get("borrowers") or "other teams").split(", ")
        many = len(teams) > 1
        return (
            f"Waiting for {shape} within the team's guarantee: {_and(teams)} "
            f"{'borrow' if many else 'borrows'} {n.get('borrowed')} {flavor} GPUs, and "
            f"{'their' if many else 'its'} jobs may not be preempted before they have run "
            f"{_duration(n.get('min_runtime_seconds'))}; reclaim can start at "
            f"{when(n.get('reclaim_at'))}."
        )
    if code == "waiting_for_preemption":
        return _waiting_for_preemption(n, jobs, flavor, shape, workers, per)
    if code == "behind_reservation":
        holders = ", ".join(f"#{j}" for j in jobs)
        return (
            f"The free {flavor} GPUs are reserved for starving job {holders}, expected to start "
            f"at {when(n.get('expected_start'))}."
        )
    if code == "held_for_older":
        older = ", ".join(f"#{j}" for j in jobs) or "an older job"
        return (
            f"Held for the team's older job {older} ({n.get('older_gpus')} {flavor} GPUs, "
            f"waiting since {when(n.get('older_submitted_at'))}), which has waited longest: "
            f"{n.get('in_use')} of the team's limit of {n.get('limit')} are in use, and this "
            f"job's {n.get('requested')} would leave it no room."
        )
    if code == "reserved":
        why = (
            f"The team holds none of its {flavor} GPUs, so its oldest job goes first"
            if n.get("team_holds_none")
            else "Waited past the starvation threshold"
        )
        nodes = n.get("nodes")
        return (
            f"{why}: {_plural(nodes, 'node')} {'is' if nodes == 1 else 'are'} reserved for this "
            f"job, which should start at {when(n.get('expected_start'))}."
        )
    if code == BACKING_OFF:
        # Seconds: the first waits are half a minute.
        return (
            f"Backing off: {n.get('start_failures')} of {n.get('max_start_attempts')} allowed "
            f"start attempts failed ({n.get('cause')}); not considered for admission before "
            f"{when(n.get('until'), seconds=True)}."
        )
    if code == "no_domain":
        return _no_domain(n, flavor)
    if code == "never_fits":
        return _never_fits(n, flavor, per, gpus, shape)
    if code in (DEPENDENCIES, DEPENDENCY_UNMET):
        return _waiting_for_jobs(code, reason.get("waits") or [])
    if code == ARRAY_LIMIT:
        return (
            f"Waiting for a slot: array {n.get('array')} runs at most {n.get('limit')} of its "
            f"tasks at once (%{n.get('limit')}), and as many are running or next in line."
        )
    return f"Pending ({code})."


def _and(words: list[str]) -> str:
    return f"{', '.join(words[:-1])} and {words[-1]}" if len(words) > 1 else "".join(words)


def _waiting_for_preemption(
    n: dict[str, Any], jobs: list[Any], flavor: str, shape: str, workers: Any, per: Any
) -> str:
    """'Freeing 16 h100 GPUs from team-b's job #12, which is saving a checkpoint until
    2026-11-28 10:42:00 UTC; then this job starts as 1 × 8.', or '..., whose pods are stopping'
    once it stopped. A reason stored without the GPUs given back names the jobs only."""
    listed = ", ".join(f"#{j}" for j in jobs)
    back = n.get("gpus_back")
    if not isinstance(back, int):
        return (
            f"Waiting for {_plural(len(jobs), 'preempted job')} ({listed}) to checkpoint and "
            f"release {shape}."
        )
    one = len(jobs) == 1
    teams = [f"{team}'s" for team in str(n.get("from_teams") or "").split(", ") if team]
    owners = f"{_and(teams)} " if teams else ""
    sentence = f"Freeing {back} {flavor} GPUs from {owners}{'job' if one else 'jobs'} {listed}"
    until = n.get("saving_until")
    if n.get("stopping") == len(jobs):
        sentence += f", whose {'pods are' if one else 'pods are all'} stopping"
    elif isinstance(until, int | float):
        sentence += (
            f", which {'is saving a checkpoint' if one else 'are saving checkpoints'} until "
            f"{when(until, seconds=True)}{'' if one else ' at the latest'}"
        )
    return f"{sentence}; then this job starts as {workers} × {per}."


def _guarantee_blocked(n: dict[str, Any], flavor: str) -> str:
    """What stops a job within its team's guarantee from reclaiming (NO_CAPACITY's extras,
    gpuqueue/scheduler/reasons.py); '' for any other job."""
    guarantee, borrowed = n.get("guarantee"), n.get("borrowed")
    if not isinstance(guarantee, int) or not isinstance(borrowed, int):
        return ""
    return (
        f" It fits within its team's guarantee ({n.get('guarantee_in_use')} of {guarantee} "
        f"{flavor} GPUs held), but reclaim finds no room: other teams hold {borrowed} {flavor} "
        f"GPUs beyond their guarantees, {n.get('takeable')} of them in jobs it may preempt (the "
        f"rest are not preemptible, still inside their minimum runtime, or would put their team "
        f"below its own guarantee), and that does not free whole workers for the gang."
    )


def _number(value: float) -> str:
    """16, 0.5, 1,024."""
    return f"{round(value, 1):,}".removesuffix(".0")


def _resource(resource: Any, amount: Any) -> tuple[str, str]:
    """An amount of a node resource as the engine gives it (CPU in millicores, memory in bytes,
    pods), and its unit: ("16", "CPUs"), ("32", "GiB of memory"), ("0", "pod slots")."""
    if not isinstance(amount, int | float):
        return "?", str(resource)
    if resource == "cpu":
        return _number(amount / 1000), "CPUs"
    if resource == "memory":
        return _number(amount / (1 << 30)), "GiB of memory"
    return _number(amount), "pod slots"


def _short_node(n: dict[str, Any]) -> str:
    """' Node h100-3: 8 GPUs free but 16 of 224 CPUs (a worker asks 32).'"""
    resource = n.get("short")
    if resource is None or "short_node" not in n:
        return ""
    left, unit = _resource(resource, n.get("short_left"))
    allocatable, _ = _resource(resource, n.get("short_allocatable"))
    per, _ = _resource(resource, n.get("short_per_worker"))
    asks = "a worker is one pod" if resource == "pods" else f"a worker asks {per}"
    return (
        f" Node {n['short_node']}: {_plural(n.get('short_node_gpus_free'), 'GPU')} free but "
        f"{left} of {allocatable} {unit} ({asks})."
    )


def _no_domain(n: dict[str, Any], flavor: str) -> str:
    """ "No rack (example.com/rack) has 4 workers' room of 8 h100 GPUs; the best has 3." The
    level is named by its label's name, then the whole key."""
    key = str(n.get("level", ""))
    name = key.rpartition("/")[2] or key
    workers, per = n.get("workers", "?"), n.get("gpus_per_worker", "?")
    room = f"room for {_plural(workers, 'worker')} of {per} {flavor} GPUs"
    largest, best = n.get("largest", 0), n.get("best_fit", 0)
    if isinstance(largest, int) and isinstance(workers, int) and largest < workers:
        return (
            f"Can never start: it requires one {name} ({key}), and no {name} has {room} even "
            f"when empty; the largest holds {largest}."
        )
    across = n.get("workers_fit", 0)
    tail = f" ({across} fit across several)" if across and across == workers else ""
    return f"Waiting for one {name} ({key}) with {room}; the best has room for {best} now{tail}."


def _never_fits(n: dict[str, Any], flavor: str, per: Any, gpus: Any, shape: str) -> str:
    """The real cause first: no node of the flavor, a worker bigger than any node, a gang
    bigger than the whole flavor, or workers that do not divide into its nodes."""
    largest, capacity = n.get("largest_node"), n.get("flavor_capacity")
    if n.get("shared") == 0:
        return (
            f"Can never start: {flavor} GPUs are not shared; ask for whole GPUs, or a flavor "
            "that shares its GPUs."
        )
    if largest == 0 and n.get("gpu_models"):
        return f"Can never start: no schedulable {flavor} node is of model {n['gpu_models']}."
    if largest == 0:
        return f"Can never start: no schedulable node offers {flavor} GPUs."
    if isinstance(per, int) and isinstance(largest, int) and per > largest:
        return (
            f"Can never start: a worker needs {per} {flavor} GPUs and the largest node has "
            f"{largest}."
        )
    if isinstance(gpus, int) and isinstance(capacity, int) and gpus > capacity:
        return (
            f"Can never start: the job asks for {shape} and the cluster has {capacity} "
            f"{flavor} GPUs in all."
        )
    short, asked, most_of = n.get("short"), n.get("short_per_worker"), n.get("short_largest")
    if (
        short is not None
        and isinstance(asked, int)
        and isinstance(most_of, int)
        and asked > most_of
    ):
        per_worker, unit = _resource(short, asked)
        largest_of, _ = _resource(short, most_of)
        return (
            f"Can never start: a worker asks {per_worker} {unit} and the largest {flavor} node "
            f"has {largest_of}."
        )
    most, workers = n.get("most_workers"), n.get("workers")
    if short is not None and isinstance(most, int) and isinstance(workers, int) and most < workers:
        per_worker, unit = _resource(short, asked)
        return (
            f"Can never start: the job asks for {shape} with {per_worker} {unit} each, and a "
            f"worker runs on one node: even empty, the {flavor} nodes hold at most {most} such "
            "workers."
        )
    if isinstance(most, int) and isinstance(workers, int) and most < workers:
        return (
            f"Can never start: the job asks for {shape}, and a worker runs on one node: even "
            f"empty, the {flavor} nodes hold at most {most} workers of {per} GPUs."
        )
    return f"Can never start: {shape} cannot be placed on the {flavor} nodes."


def _waiting_for_jobs(code: str, waits: list[Any]) -> str:
    """'Waiting for job #12 to succeed (running now) and job #13 to end (pending now).'; one
    `after_not_ok` job failing is enough: 'any of job #14 (running now) or job #15 (pending
    now) to fail or be cancelled'."""
    valid = [w for w in waits if isinstance(w, list) and len(w) == 3]
    either = [w for w in valid if w[1] == "after_not_ok"]
    grouped = len(either) > 1
    parts = [
        f"job #{w[0]} {_AWAITED.get(w[1], w[1])} ({str(w[2]).lower()} now)"
        for w in valid
        if not (grouped and w[1] == "after_not_ok")
    ]
    if grouped:
        jobs = " or ".join(f"job #{w[0]} ({str(w[2]).lower()} now)" for w in either)
        parts.append(f"any of {jobs} {_AWAITED['after_not_ok']}")
    listed = " and ".join(parts)
    if code == DEPENDENCY_UNMET:
        return (
            f"Can never start: it depends on {listed}, which can no longer happen; kept "
            "pending as its submitter asked (cancel it when it is no longer wanted)."
        )
    return f"Waiting for {listed}."
