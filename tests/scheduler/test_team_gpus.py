"""A shared DRA flavor's GPU serves one team: its sharers share one ResourceClaim, which lives
in one namespace. Fractions of two teams never share a GPU there (they do on a flavor of the
device plugin's shared resource); a team fills the GPUs it opened first."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.model import PendingJob, RunningJob, Snapshot
from tests.scheduler.builders import NOW, team
from tests.scheduler.test_shared_gpus import SHARED, frac, frac_running, gpu_node

TEAMS = (team("a", limit=100), team("b", limit=100))


def team_snap(
    jobs: tuple[PendingJob, ...], running: tuple[RunningJob, ...] = (), bound: bool = True
) -> Snapshot:
    return Snapshot(
        NOW,
        (gpu_node("n1", 2),),
        TEAMS,
        running,
        jobs,
        shared_flavors=SHARED,
        team_gpu_flavors=SHARED if bound else frozenset(),
    )


def test_two_teams_quarters_take_a_gpu_each_on_a_team_bound_flavor() -> None:
    jobs = (frac(1, "a", 250), frac(2, "b", 250), frac(3, "a", 250), frac(4, "b", 250))
    devices = {a.job_id: a.devices for a in plan(team_snap(jobs)).admissions}
    assert devices == {1: (("n1", 0),), 3: (("n1", 0),), 2: (("n1", 1),), 4: (("n1", 1),)}
    shared = {a.job_id: a.devices for a in plan(team_snap(jobs, bound=False)).admissions}
    assert set(shared.values()) == {(("n1", 0),)}


def test_a_gpu_another_team_runs_on_is_full_to_a_team() -> None:
    """Team a's quarter runs on GPU 0 of the one GPU node: team b's fraction takes GPU 1, and
    a second of b's waits once GPU 1 is full, although GPU 0 has room."""
    held = (frac_running(10, "a", 250, [("n1", 0)]),)
    jobs = (frac(1, "b", 750), frac(2, "b", 500))
    result = plan(team_snap(jobs, held))
    assert {a.job_id: a.devices for a in result.admissions} == {1: (("n1", 1),)}
    assert [p.job_id for p in result.pending] == [2]
    # Its reason counts team b's room only: GPU 1's quarter, not GPU 0's three quarters.
    # Its reason counts team b's room only: GPU 1's quarter, not GPU 0's three quarters.
    numbers = result.pending[0].reason.numbers
    assert (numbers["workers_fit"], numbers["most_gpu_room"]) == (0, 250)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from([250, 500, 750])), max_size=10),
    st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from([250, 500])), max_size=3),
)
def test_no_gpu_of_a_team_bound_flavor_serves_two_teams(
    asks: list[tuple[str, int]], runs: list[tuple[str, int]]
) -> None:
    running = tuple(
        frac_running(100 + i, who, milli, [("n1", i % 2)]) for i, (who, milli) in enumerate(runs)
    )
    on_gpu: dict[int, set[str]] = {}
    for i, (who, _) in enumerate(runs):
        on_gpu.setdefault(i % 2, set()).add(who)
    assume(all(len(who) == 1 for who in on_gpu.values()))  # what runs obeys the rule
    assume(all(sum(m for i, (_, m) in enumerate(runs) if i % 2 == g) <= 1000 for g in (0, 1)))
    jobs = tuple(frac(i + 1, who, milli) for i, (who, milli) in enumerate(asks))
    result = plan(team_snap(jobs, running))
    teams: dict[tuple[str, int], set[str]] = {}
    used: dict[tuple[str, int], int] = {}
    by_id = {j.id: j for j in jobs}
    for job in running:
        for gpu in job.devices:
            teams.setdefault(gpu, set()).add(job.team)
            used[gpu] = used.get(gpu, 0) + job.gpu_milli
    for a in result.admissions:
        for gpu in a.devices:
            teams.setdefault(gpu, set()).add(by_id[a.job_id].team)
            used[gpu] = used.get(gpu, 0) + by_id[a.job_id].gpu_milli
    assert all(len(who) == 1 for who in teams.values()), teams
    assert all(milli <= 1000 for milli in used.values()), used
