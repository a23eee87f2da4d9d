"""A team's turn (ordering.py, rule 1b): a job is not overtaken for ever by its own team's newer
jobs, and says so."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.model import Policy, ReasonCode, RunningJob, Snapshot
from tests.scheduler.builders import (
    HOUR,
    NOW,
    Case,
    check,
    nodes,
    pending,
    running,
    team,
)

OFF = Policy(hold_for_older=False)


def at_limit(*queued: object, gang_waited: float = 2 * HOUR) -> dict[str, object]:
    """Team a (limit 24) runs 20 one-GPU jobs started after its 3 x 8 gang (job 1) was
    submitted; 12 of the 32 GPUs are free."""
    return {
        "nodes": nodes(4, h100=8),
        "teams": (team("a", guarantee=8, limit=24),),
        "running": tuple(
            running(100 + i, "a", {f"n{1 + i // 8}": 1}, started=NOW - 600, max_runtime=HOUR)
            for i in range(20)
        ),
        "pending": (pending(1, "a", workers=3, gpus=8, submitted=NOW - gang_waited), *queued),
    }


CASES = [
    Case(
        "a gang at its team's limit holds the team's newer jobs once it has waited an hour",
        **at_limit(pending(2, "a", submitted=NOW - 100)),  # type: ignore[arg-type]
        admitted=set(),
        reasons={1: ReasonCode.OVER_LIMIT, 2: ReasonCode.HELD_FOR_OLDER},
        numbers={
            1: {"limit": 24, "in_use": 20, "newer_gpus": 20},
            2: {"limit": 24, "in_use": 20, "older_gpus": 24},
        },
        waits_on={2: (1,)},
    ),
    Case(
        "before the threshold the team's newer jobs start as they fit",
        **at_limit(pending(2, "a", submitted=NOW - 100), gang_waited=1200),  # type: ignore[arg-type]
        admitted={2},
        reasons={1: ReasonCode.OVER_LIMIT},
        numbers={1: {"newer_gpus": None}},
    ),
    Case(
        "without the rule the newer job takes the limit's last GPUs",
        **at_limit(pending(2, "a", submitted=NOW - 100)),  # type: ignore[arg-type]
        policy=OFF,
        admitted={2},
    ),
    Case(
        "a newer job of higher priority is not held",
        **at_limit(pending(2, "a", submitted=NOW - 100, priority=5)),  # type: ignore[arg-type]
        admitted={2},
    ),
    Case(
        "a newer job that ends before the gang's reservation starts backfills",
        nodes=nodes(4, h100=8),
        teams=(team("a", guarantee=28, limit=28), team("b", guarantee=4, limit=8)),
        running=(
            *(
                running(100 + i, "a", {"n1": 1}, started=NOW - 600, max_runtime=HOUR)
                for i in range(4)
            ),
            running(200, "b", {"n4": 1}, gpus=4, started=NOW - 600, max_runtime=2 * HOUR),
        ),
        pending=(
            pending(1, "a", workers=3, gpus=8, submitted=NOW - 2 * HOUR),
            pending(2, "a", gpus=1, submitted=NOW - 100, max_runtime=600),
            pending(3, "a", gpus=1, submitted=NOW - 90),
        ),
        # 24 GPUs are free, but no 3 nodes are: the gang fits its team's share and limit with
        # the 4 GPUs in use, starves and reserves n1-n3; the short job backfills, the other
        # newer job would leave it no room under the limit (28) and waits.
        reservations={1: ({"n1": 1, "n2": 1, "n3": 1}, NOW + 3000)},
        admitted={2},
        reasons={1: ReasonCode.RESERVED, 3: ReasonCode.HELD_FOR_OLDER},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_team_turn(case: Case) -> None:
    check(case)


# --- the bound, over time ---------------------------------------------------------------------

CYCLE = 60.0
STARVING = 600.0


@dataclass
class Submitted:
    id: int
    at: float
    workers: int
    gpus: int
    runtime: float
    started: float | None = None


def replay(jobs: list[Submitted], limit: int, policy: Policy) -> None:
    """One team on 4 nodes of 8 GPUs, a plan every CYCLE seconds until every job started
    (each runs for its runtime, which it declares as its max runtime)."""
    teams = (team("a", guarantee=min(limit, 8), limit=limit),)
    cluster = nodes(4, h100=8)
    now = NOW
    live: list[tuple[Submitted, RunningJob]] = []
    horizon = NOW + max(j.at for j in jobs) + 4 * len(jobs) * 3600
    while any(j.started is None for j in jobs) and now < horizon:
        live = [(j, r) for j, r in live if r.started_at + j.runtime > now]
        queued = tuple(
            pending(
                j.id,
                "a",
                workers=j.workers,
                gpus=j.gpus,
                submitted=NOW + j.at,
                max_runtime=j.runtime,
            )
            for j in jobs
            if j.started is None and NOW + j.at <= now
        )
        snapshot = Snapshot(now, cluster, teams, tuple(r for _, r in live), queued)
        result = plan(snapshot, policy)
        by_id = {j.id: j for j in jobs}
        for admission in result.admissions:
            job = by_id[admission.job_id]
            job.started = now
            live.append(
                (
                    job,
                    running(
                        job.id,
                        "a",
                        dict(admission.placement),
                        gpus=job.gpus,
                        started=now,
                        max_runtime=job.runtime,
                    ),
                )
            )
        now += CYCLE


jobs_strategy = st.lists(
    st.tuples(
        st.integers(0, 90),  # submitted, minutes from the start
        st.sampled_from([(1, 1), (1, 2), (1, 8), (2, 8), (3, 8), (2, 4)]),  # workers x GPUs
        st.integers(2, 40),  # runtime, minutes
    ),
    min_size=1,
    max_size=12,
)
# A sweep: one-GPU jobs every `gap` minutes from `start`, each running `runtime` minutes.
streams = st.tuples(st.integers(0, 30), st.integers(0, 80), st.integers(1, 3), st.integers(5, 40))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs_strategy, streams, st.integers(8, 32))
def test_the_oldest_job_is_passed_by_newer_ones_for_a_bounded_time(
    workload: list[tuple[int, tuple[int, int], int]],
    stream: tuple[int, int, int, int],
    limit: int,
) -> None:
    """Whatever the team submits, a job starts at the latest the starvation threshold after
    it became the team's oldest waiting job (its submission, or the start of the last job
    older than it), plus twice the longest runtime (the team drains to its limit, then the
    nodes reserved for it drain) and a few cycles: its newer jobs pass it no longer than that.
    """
    start, count, gap, minutes = stream
    workload = workload + [(start + i * gap, (1, 1), minutes) for i in range(count)]
    jobs = [
        Submitted(i + 1, at * 60.0, workers, gpus, runtime * 60.0)
        for i, (at, (workers, gpus), runtime) in enumerate(sorted(workload))
        if workers * gpus <= limit
    ]
    if not jobs:
        return
    replay(jobs, limit, Policy(starvation_seconds=STARVING))
    longest = max(j.runtime for j in jobs)
    oldest_since = NOW
    for job in jobs:  # in order of submission
        assert job.started is not None, job
        became_oldest = max(NOW + job.at, oldest_since)
        bound = max(became_oldest, NOW + job.at + STARVING) + 2 * longest + 3 * CYCLE
        assert job.started <= bound, (job, bound - NOW)
        oldest_since = max(oldest_since, job.started)


def test_without_the_rule_a_stream_of_newer_jobs_passes_the_gang() -> None:
    """The workload of the property above that the rule is for: a 3 x 8 gang at the limit
    behind a steady stream of one-GPU jobs."""
    for policy, waits in ((OFF, False), (Policy(starvation_seconds=STARVING), True)):
        stream = [Submitted(i + 2, 60.0 * i, 1, 1, 30 * 60.0) for i in range(240)]
        gang = Submitted(1, 1830.0, 3, 8, 600.0)  # once the stream fills the limit
        replay([gang, *stream], 24, policy)
        started_in_time = gang.started is not None and gang.started <= NOW + 3 * HOUR
        assert started_in_time is waits, gang
