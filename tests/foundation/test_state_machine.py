"""The job state machine: every allowed move writes an event; a forbidden one raises."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.core.states import FINAL, TRANSITIONS, InvalidTransition, JobState, check_transition
from gpuqueue.models import JobEvent
from gpuqueue.services.jobs.transitions import transition

ALL_PAIRS = [(a, b) for a in JobState for b in JobState]


@pytest.mark.parametrize(("from_state", "to_state"), ALL_PAIRS)
def test_check_transition_follows_the_table_of_the_design(
    from_state: JobState, to_state: JobState
) -> None:
    if to_state in TRANSITIONS[from_state]:
        check_transition(1, from_state, to_state)
    else:
        with pytest.raises(InvalidTransition):
            check_transition(1, from_state, to_state)


def test_final_states_are_final_and_cancel_reaches_every_other() -> None:
    for state in FINAL:
        assert TRANSITIONS[state] == frozenset()
    for state in set(JobState) - FINAL:
        assert JobState.CANCELLED in TRANSITIONS[state]


def test_a_transition_writes_an_event_with_actor_and_reason(submit: Any) -> None:
    job = submit()
    assert transition(job, JobState.ADMITTED, reason="fits", actor="cycle", placement={"n1": 1})
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.placement == {"n1": 1}
    events = list(
        JobEvent.objects.filter(job=job).values_list("from_state", "to_state", "actor", "reason")
    )
    assert events == [
        ("", "PENDING", "user:alice", "submitted"),
        ("PENDING", "ADMITTED", "cycle", "fits"),
    ]


def test_an_invalid_transition_raises_and_changes_nothing(submit: Any) -> None:
    job = submit()
    with pytest.raises(InvalidTransition):
        transition(job, JobState.SUCCEEDED, reason="?", actor="cycle")
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert JobEvent.objects.filter(job=job).count() == 1


def test_a_stale_transition_loses_quietly_to_the_one_that_won(submit: Any) -> None:
    job = submit()
    from gpuqueue.models import Job

    stale = Job.objects.get(pk=job.pk)
    assert transition(job, JobState.CANCELLED, reason="user", actor="user:alice")
    assert not transition(stale, JobState.ADMITTED, reason="fits", actor="cycle")
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert JobEvent.objects.filter(job=job, to_state=JobState.ADMITTED).count() == 0
