"""An array's schedule as a Slurm user reckons it: held tasks take the slot that frees first,
from the tasks' declared runtimes; squeue's one-line label. Pure: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpuqueue.core.array_schedule import (
    Task,
    index_ranges,
    outlook,
    slurm_label,
    throttle_sentence,
)

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def minutes(n: float) -> datetime:
    return NOW + timedelta(minutes=n)


def running(index: int, started_min_ago: float, runtime_min: int | None = 10) -> Task:
    return Task(
        index,
        "RUNNING",
        started=minutes(-started_min_ago),
        runtime_seconds=None if runtime_min is None else runtime_min * 60,
    )


def held(index: int, runtime_min: int | None = 10) -> Task:
    return Task(
        index,
        "PENDING",
        held=True,
        runtime_seconds=None if runtime_min is None else runtime_min * 60,
    )


def test_a_held_task_starts_as_the_running_task_that_ends_first_finishes() -> None:
    # %2: task 0 ends in 8 min, task 1 in 3 min; task 2 takes 1's slot, task 3 takes 0's.
    tasks = [running(0, 2), running(1, 7), held(2), held(3)]
    seen = outlook(tasks, 2, NOW)
    assert seen.tasks[2].after == 1 and seen.tasks[2].start == minutes(3)
    assert seen.tasks[3].after == 0 and seen.tasks[3].start == minutes(8)
    assert seen.next_start == minutes(3)
    # Task 3 ends last: 8 + 10 minutes.
    assert seen.finish == minutes(18)


def test_the_second_round_waits_for_the_first_held_tasks() -> None:
    tasks = [running(0, 0), held(1), held(2)]
    seen = outlook(tasks, 1, NOW)
    assert (seen.tasks[1].after, seen.tasks[1].start) == (0, minutes(10))
    assert (seen.tasks[2].after, seen.tasks[2].start) == (1, minutes(20))
    assert seen.finish == minutes(30)


def test_without_declared_runtimes_the_order_is_told_but_no_time() -> None:
    tasks = [running(0, 5, None), running(1, 1, None), held(2, None)]
    seen = outlook(tasks, 2, NOW)
    # The task that started first is taken to free its slot first.
    assert seen.tasks[2].after == 0 and seen.tasks[2].start is None
    assert seen.finish is None and seen.next_start is None


def test_a_task_past_its_runtime_ends_now_not_in_the_past() -> None:
    seen = outlook([running(0, 30), held(1)], 1, NOW)
    assert seen.tasks[1].start == NOW


def test_a_free_slot_is_next_in_line_without_a_time() -> None:
    seen = outlook([held(4)], 3, NOW)
    assert seen.tasks[4].after is None and seen.tasks[4].start is None


def test_tasks_offered_to_the_engine_start_at_their_estimate() -> None:
    offered = Task(0, "PENDING", estimated_start=minutes(5), runtime_seconds=600)
    seen = outlook([offered, held(1)], 1, NOW)
    assert seen.tasks[0].start == minutes(5)
    assert (seen.tasks[1].after, seen.tasks[1].start) == (0, minutes(15))
    assert seen.finish == minutes(25)


def test_finished_tasks_do_not_count() -> None:
    seen = outlook([Task(0, "SUCCEEDED"), running(1, 0)], 1, NOW)
    assert seen.finish == minutes(10) and seen.tasks == {}


def test_the_sentence_says_the_limit_and_the_task_it_follows() -> None:
    assert throttle_sentence(12, 100, 10, 3) == (
        "Task 12 of 100: the array runs 10 at a time; it starts as task 3 finishes."
    )
    assert "next in line" in throttle_sentence(5, 100, 10, None)


def test_squeue_label_lists_the_waiting_indices_with_the_limit() -> None:
    assert index_ranges([10, 11, 12, 20, 22, 23]) == "10-12,20,22-23"
    assert slurm_label(123, "0-99%10", list(range(10, 100)), 10) == "123_[10-99%10]"
    assert slurm_label(7, "0-9", [], None) == "7_[0-9]"


@given(
    st.lists(st.integers(0, 120), min_size=0, max_size=6),  # running tasks' minutes so far
    st.integers(0, 12),  # held tasks
    st.integers(1, 6),  # the limit
)
def test_never_more_tasks_at_once_than_the_limit(ran: list[int], n_held: int, limit: int) -> None:
    ran = ran[:limit]
    tasks = [running(i, m) for i, m in enumerate(ran)]
    tasks += [held(len(ran) + i) for i in range(n_held)]
    seen = outlook(tasks, limit, NOW)
    spans = [
        (t.started or NOW, (t.started or NOW) + timedelta(minutes=10))
        for t in tasks
        if t.state == "RUNNING"
    ]
    spans = [(max(a, NOW) if b < NOW else a, max(b, NOW)) for a, b in spans]
    spans += [(o.start, o.start + timedelta(minutes=10)) for o in seen.tasks.values() if o.start]
    # At any task's start, at most `limit` tasks are running (half-open intervals).
    for start, _ in spans:
        assert sum(1 for a, b in spans if a <= start < b) <= limit
    # Held tasks start in index order.
    starts = [seen.tasks[i].start for i in sorted(seen.tasks)]
    known = [s for s in starts if s is not None]
    assert known == sorted(known)
