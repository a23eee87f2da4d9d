"""The state machine lists every event a job's timeline may hold: its entry, its transitions,
and the kinds of event within a state (a checkpoint's acknowledgement). tests/conftest.py checks
every event each database test wrote against this list."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.core.states import CHECKPOINT_ACKNOWLEDGED, is_listed_event


@pytest.mark.parametrize(
    ("from_state", "to_state", "kind", "listed"),
    [
        ("", "PENDING", None, True),  # submitted
        ("", "RUNNING", None, False),
        ("PENDING", "ADMITTED", None, True),
        ("PREEMPTING", "PENDING", None, True),
        ("SUCCEEDED", "PENDING", None, False),
        ("PREEMPTING", "PREEMPTING", CHECKPOINT_ACKNOWLEDGED, True),
        ("PREEMPTING", "PREEMPTING", None, False),  # a self-move without a listed kind
        ("RUNNING", "RUNNING", CHECKPOINT_ACKNOWLEDGED, False),  # the kind, in another state
        ("PREEMPTING", "LOST", None, False),
    ],
)
def test_an_event_is_listed_only_as_an_entry_a_transition_or_a_kind_within_its_state(
    from_state: str, to_state: str, kind: str | None, listed: bool
) -> None:
    assert is_listed_event(from_state, to_state, kind) is listed


def test_a_checkpoint_acknowledgement_is_recorded_as_its_listed_kind(
    world: Any, submit: Any
) -> None:
    from django.utils import timezone

    from gpuqueue.core.states import EVENT_KIND, JobState
    from gpuqueue.models import JobEvent
    from gpuqueue.services.jobs.checkpoint import acknowledge_checkpoint
    from gpuqueue.services.jobs.transitions import transition

    job = submit(world.alice)
    now = timezone.now()
    transition(job, JobState.ADMITTED, reason="fits", actor="cycle", placement={"h100-0": 1},
               admitted_at=now, attempts=1)  # fmt: skip
    transition(job, JobState.RUNNING, reason="started", actor="cluster", started_at=now)
    transition(job, JobState.PREEMPTING, reason="reclaim", actor="cycle")
    assert acknowledge_checkpoint(job, "s3://ckpt/1", actor="job")
    event = JobEvent.objects.get(job=job, reason__startswith="checkpoint acknowledged")
    assert (event.from_state, event.to_state) == (JobState.PREEMPTING, JobState.PREEMPTING)
    assert event.details == {EVENT_KIND: CHECKPOINT_ACKNOWLEDGED, "location": "s3://ckpt/1"}
    assert is_listed_event(event.from_state, event.to_state, event.details[EVENT_KIND])
