"""The launcher's restart policy: backoff that doubles, forgets after a steady run, and gives up
on a process that keeps dying."""

from __future__ import annotations

from gpuqueue.ops.supervision import RestartPolicy


def test_a_process_that_dies_in_a_row_waits_twice_as_long_each_time_up_to_the_cap() -> None:
    policy = RestartPolicy(first_delay=1, max_delay=4, give_up_after=100)
    delays = []
    now = 0.0
    for _ in range(5):
        policy.started("web", now)
        now += 1
        delay = policy.died("web", now)
        assert delay is not None
        delays.append(delay)
        now += delay
    assert delays == [1, 2, 4, 4, 4]


def test_a_process_that_ran_steadily_is_restarted_at_once_again() -> None:
    policy = RestartPolicy(first_delay=1, settle=60, give_up_after=100)
    policy.started("worker", 0)
    assert policy.died("worker", 1) == 1
    policy.started("worker", 2)
    assert policy.died("worker", 3) == 2
    policy.started("worker", 5)
    assert policy.died("worker", 500) == 1  # it had been up for minutes


def test_a_process_that_keeps_dying_is_given_up_on_and_others_are_not() -> None:
    policy = RestartPolicy(window=120, give_up_after=3)
    assert policy.died("beat", 0) is not None
    assert policy.died("beat", 10) is not None
    assert policy.died("watcher", 15) is not None
    assert policy.died("beat", 20) is None
    # Deaths spread wider than the window are not a crash loop.
    assert policy.died("watcher", 200) is not None
    assert policy.died("watcher", 400) is not None
