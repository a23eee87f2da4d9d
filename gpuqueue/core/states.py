"""The job state machine (docs/architecture.md, "The job life cycle"), in one place."""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    PENDING = "PENDING"
    ADMITTED = "ADMITTED"
    RUNNING = "RUNNING"
    PREEMPTING = "PREEMPTING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


S = JobState
FINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
# States that hold GPUs on the cluster (the engine sees them as running jobs).
HOLDING = frozenset({S.ADMITTED, S.RUNNING, S.PREEMPTING})
ACTIVE = frozenset({S.PENDING}) | HOLDING

# The names a person filters by, in the dashboard, the API and the CLI alike, in any case: a
# group of states or one state.
STATE_NAMES: dict[str, frozenset[str]] = {
    "active": frozenset(s.value for s in ACTIVE),
    "holding": frozenset(s.value for s in HOLDING),
    "finished": frozenset(s.value for s in FINAL),
    **{s.value.lower(): frozenset({s.value}) for s in JobState},
}


def states_named(name: str) -> frozenset[str] | None:
    """The states `name` stands for (any case), or None for a name that is none of them."""
    return STATE_NAMES.get(name.strip().lower())


def unknown_state_message(name: str) -> str:
    return f"Unknown state {name!r}: one of {', '.join(STATE_NAMES)} (any case)."


TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    S.PENDING: frozenset({S.ADMITTED, S.CANCELLED, S.FAILED}),
    # ADMITTED -> PENDING: the gang never became ready (stuck pods, lost node) and is requeued.
    # ADMITTED -> SUCCEEDED/FAILED: a short job can finish before it is seen running.
    S.ADMITTED: frozenset({S.RUNNING, S.PREEMPTING, S.PENDING, S.SUCCEEDED, S.FAILED, S.CANCELLED}),
    # RUNNING -> PENDING: a node died under the gang; it is torn down and requeued.
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.PREEMPTING, S.PENDING, S.CANCELLED}),
    # PREEMPTING -> SUCCEEDED/FAILED: the job ended on its own during its checkpoint grace.
    # PREEMPTING -> RUNNING/ADMITTED: the preemption was withdrawn before the job stopped (no
    # job needs its GPUs any more: gpuqueue/cycle/run.py).
    S.PREEMPTING: frozenset({S.PENDING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.RUNNING, S.ADMITTED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


# Every job enters the machine PENDING, from no state (its submission event).
ENTRY = S.PENDING

# Events a job's timeline records within a state, changing nothing: from_state and to_state are
# that state, and details["event"] names which of the kinds listed for it this is.
EVENT_KIND = "event"
CHECKPOINT_ACKNOWLEDGED = "checkpoint_acknowledged"
WITHIN_STATE_EVENTS: dict[JobState, frozenset[str]] = {
    # The workload saved its state (details["location"]); the job stays PREEMPTING until its
    # pods are gone and it is requeued with that location.
    S.PREEMPTING: frozenset({CHECKPOINT_ACKNOWLEDGED}),
}


def is_listed_event(from_state: str, to_state: str, kind: str | None = None) -> bool:
    """Whether an event row is one the machine lists: the entry (no state to ENTRY), a
    transition of TRANSITIONS, or an event of `kind` within a state (WITHIN_STATE_EVENTS)."""
    if not from_state:
        return to_state == ENTRY
    if from_state not in JobState.values or to_state not in JobState.values:
        return False
    if from_state == to_state:
        return kind in WITHIN_STATE_EVENTS.get(JobState(from_state), frozenset())
    return JobState(to_state) in TRANSITIONS[JobState(from_state)]


# How a person is told that a job has ended and so can change no more.
ENDED_WORDS = {
    S.CANCELLED: "is already cancelled",
    S.SUCCEEDED: "has already finished (succeeded)",
    S.FAILED: "has already failed",
}


class InvalidTransition(Exception):
    def __init__(self, job_id: int | None, from_state: str, to_state: str) -> None:
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state
        super().__init__(f"job {job_id} cannot go from {from_state} to {to_state}")

    @property
    def message(self) -> str:
        """The sentence for a person: a job that ended is said to have ended, not to be unable
        to become the state asked for."""
        job = "The job" if self.job_id is None else f"Job {self.job_id}"
        ended = ENDED_WORDS.get(JobState(self.from_state))
        if ended:
            return f"{job} {ended}."
        return f"{job} is {self.from_state} and cannot become {self.to_state}."


def check_transition(job_id: int | None, from_state: str, to_state: str) -> None:
    if JobState(to_state) not in TRANSITIONS[JobState(from_state)]:
        raise InvalidTransition(job_id, from_state, to_state)
