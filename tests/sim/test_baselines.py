"""The harder baselines on tiny traces worked out by hand: EASY backfill with true and with
predicted runtimes, and per-team fair share without reservations or preemption."""

from __future__ import annotations

from gpuqueue.sim import simulate, uniform_cluster
from tests.sim.builders import EXACT, job, team

ONE_NODE = uniform_cluster(1, 8)
OPEN_TEAM = (team("a", guarantee=8, limit=8),)


def starts(result: object) -> dict[int, float | None]:
    return {r.job.id: r.first_start for r in result.runs}  # type: ignore[attr-defined]


# One node of 8: A holds 4 until 100; gang B (8 GPUs) arrives at 1; C (4 GPUs) at 2.
def head_of_line(c_runs: float) -> list:  # type: ignore[type-arg]
    return [job(1, 0, 100, gpus=4), job(2, 1, 100, gpus=8), job(3, 2, c_runs, gpus=4)]


def test_easy_with_true_runtimes_backfills_a_job_that_ends_before_the_heads_reservation() -> None:
    result = simulate(head_of_line(50), ONE_NODE, OPEN_TEAM, "easy-oracle", EXACT)
    assert starts(result) == {1: 0, 2: 100, 3: 2}


def test_easy_keeps_a_job_that_would_delay_the_head_behind_it() -> None:
    # C would run until 202, past B's reservation at 100: plain backfill lets it delay B.
    easy = simulate(head_of_line(200), ONE_NODE, OPEN_TEAM, "easy-oracle", EXACT)
    assert starts(easy) == {1: 0, 2: 100, 3: 200}
    plain = simulate(head_of_line(200), ONE_NODE, OPEN_TEAM, "backfill", EXACT)
    assert starts(plain) == {1: 0, 2: 202, 3: 2}


def test_easy_with_predictions_and_no_history_yet_takes_every_job_for_an_hour() -> None:
    # Nothing has finished: A and C are both predicted to run an hour, so C (really 50 s)
    # would pass B's reservation and waits, where the oracle backfilled it.
    result = simulate(head_of_line(50), ONE_NODE, OPEN_TEAM, "easy-predicted", EXACT)
    assert starts(result) == {1: 0, 2: 100, 3: 200}


def test_fair_share_serves_the_team_furthest_below_its_share_before_older_jobs() -> None:
    # Teams a and b are each guaranteed 4 of the 8 GPUs. a fills the node at 0 (a1 until
    # 100, a2 until 200) and queues a3; b's job comes at 1. At 100 a holds 4 of its 4 and b
    # none of its 4: b1 goes before the older a3, which starts when a2 ends.
    teams = (team("a", guarantee=4, limit=8), team("b", guarantee=4, limit=8))
    trace = [
        job(1, 0, 100, gpus=4),
        job(2, 0, 200, gpus=4),
        job(3, 0, 100, gpus=4),
        job(4, 1, 100, gpus=4, team="b"),
    ]
    assert starts(simulate(trace, ONE_NODE, teams, "fairshare", EXACT)) == {
        1: 0,
        2: 0,
        3: 200,
        4: 100,
    }
    assert starts(simulate(trace, ONE_NODE, teams, "fifo", EXACT)) == {1: 0, 2: 0, 3: 100, 4: 200}


def test_fair_share_skips_a_job_that_does_not_fit_for_a_later_one_that_does() -> None:
    trace = [job(1, 0, 100, gpus=4), job(2, 1, 100, gpus=8), job(3, 2, 50, gpus=4)]
    assert starts(simulate(trace, ONE_NODE, OPEN_TEAM, "fairshare", EXACT)) == {
        1: 0,
        2: 100,
        3: 2,
    }
