"""Jobs and events read back through `Representation` (gpuqueue/api/cached_fields.py) exactly as
through DRF's own `Serializer.to_representation`: the same keys in the same order, the same
values of the same types, or the same error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from django.contrib.auth import get_user_model
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from gpuqueue.api.cached_fields import Representation
from gpuqueue.api.serializers import JobEventSerializer, JobSerializer
from gpuqueue.core.states import JobState
from gpuqueue.models import Flavor, Job, JobEvent, Standing
from teams.models import Team


def typed(value: Any) -> Any:
    """`value` with the type of everything in it, so that 1 and True, or a list and a tuple,
    do not compare equal."""
    if isinstance(value, dict):
        return (type(value), [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value), [typed(v) for v in value])
    return (type(value), value)


def read(serializer_class: type, instance: Any, *, drf: bool) -> Any:
    serializer = serializer_class(instance)
    try:
        if drf:
            return typed(serializers.Serializer.to_representation(serializer, instance))
        return typed(serializer.to_representation(instance))
    except Exception as exc:  # noqa: BLE001 - both must fail alike
        return ("error", type(exc))


TEXT = st.text(max_size=6) | st.sampled_from(["", "é", "\ud800"])
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | TEXT | st.floats(allow_nan=False)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=2), max_leaves=4)
STRINGS = TEXT | SCALARS
# Bounded: a str among them times an int is a string that long (`Job.gpus`), and "7" × 10**12
# is a terabyte.
INTS = st.integers(-5, 10**6) | st.sampled_from([None, True, False, "7", 2.0])
WHEN = st.none() | st.datetimes(
    min_value=datetime(2000, 1, 1), timezones=st.sampled_from([UTC, timezone(timedelta(hours=5))])
)
CONTAINERS = (
    st.none()
    | st.lists(STRINGS, max_size=3)
    | st.dictionaries(st.text(max_size=3), STRINGS, max_size=3)
    | st.dictionaries(st.integers(0, 3), STRINGS, max_size=2)
    | st.sampled_from(["ab", ("x",)])
)
STATES = st.sampled_from([*JobState.values, *JobState, "", None, "LOST"])


@st.composite
def jobs(draw: Any) -> Job:
    team = draw(st.sampled_from([Team(id=1, slug="team-a"), Team(id=2, slug=""), None]))
    job = Job(
        id=draw(st.integers(1, 10**12) | st.none()),
        team=team,
        user=get_user_model()(id=3, username=draw(st.sampled_from(["alice", ""]))),
        flavor=Flavor(id=4, name="h100"),
    )
    # No Kubernetes object behind it (JobSource), told to the ORM: nothing here reads the
    # database.
    Job.source.related.set_cached_value(job, None)
    for name in ("name", "image", "idempotency_key", "message", "checkpoint_location"):
        setattr(job, name, draw(STRINGS))
    for name in ("command", "env", "labels", "annotations", "placement"):
        setattr(job, name, draw(CONTAINERS))
    for name in (
        "workers",
        "gpus_per_worker",
        "priority",
        "checkpoint_grace_seconds",
        "max_runtime_seconds",
        "expected_runtime_seconds",
        "attempts",
        "exit_code",
    ):
        setattr(job, name, draw(INTS))
    job.preemptible = draw(st.sampled_from([True, False, None, 0, 1, "yes"]))
    job.state = draw(STATES)
    for name in ("submitted_at", "admitted_at", "started_at", "finished_at", "estimated_start"):
        setattr(job, name, draw(WHEN))
    # What it shows while pending, or no `Standing` at all (told to the ORM, as the source).
    standing = Standing(
        job=job,
        reason=draw(
            JSON
            | st.fixed_dictionaries(
                {"code": st.sampled_from(["no_fit", "quota", "x"]), "numbers": st.just({})}
            )
        ),
        queue_position=draw(INTS),
        cluster_position=draw(INTS),
    )
    Job.standing.related.set_cached_value(job, draw(st.sampled_from([standing, None])))
    return job


@settings(max_examples=400, deadline=None)
@given(job=jobs())
def test_a_job_reads_as_drf_reads_it(job: Job) -> None:
    assert read(JobSerializer, job, drf=False) == read(JobSerializer, job, drf=True)


@settings(max_examples=200, deadline=None)
@given(
    at=WHEN,
    from_state=STATES,
    to_state=STATES,
    reason=STRINGS,
    actor=STRINGS,
    details=JSON | st.dictionaries(st.text(max_size=2), JSON, max_size=2),
)
def test_an_event_reads_as_drf_reads_it(**values: Any) -> None:
    event = JobEvent(id=1, job_id=2, **values)
    assert read(JobEventSerializer, event, drf=False) == read(JobEventSerializer, event, drf=True)


def test_plain_values_are_taken_as_they_are() -> None:
    """The shortcut is taken where it should be: a str, an int, a bool, a list of str and a
    dict of str to int come back as the very values (or copies) held by the job."""
    job = Job(
        id=1,
        team=Team(id=1, slug="team-a"),
        user=get_user_model()(id=3, username="alice"),
        flavor=Flavor(id=4, name="h100"),
        name="train",
        command=["python", "t.py"],
        placement={"n1": 2},
        workers=2,
        gpus_per_worker=4,
        preemptible=True,
        state=JobState.PENDING,
    )
    Job.source.related.set_cached_value(job, None)  # mirrors no Kubernetes object
    Job.standing.related.set_cached_value(job, None)  # not yet explained
    steps = {step[0]: step for step in Representation(JobSerializer().fields).steps}
    assert steps["name"][4] is str and steps["workers"][4] is int
    assert steps["preemptible"][4] is bool and steps["pending_reason"][4] is object
    assert steps["command"][6] is str and steps["placement"][6] is int
    data = JobSerializer(job).data
    assert data["name"] is job.name and data["team"] is job.team.slug
    assert data["command"] == job.command and data["command"] is not job.command
    assert data["placement"] == {"n1": 2} and data["gpus"] == 8
    assert read(JobSerializer, job, drf=False) == read(JobSerializer, job, drf=True)


def test_a_callable_attribute_is_called_as_drf_calls_it() -> None:
    job = Job(id=1, team=None, user=get_user_model()(id=3, username="alice"), name="x")
    Job.source.related.set_cached_value(job, None)  # mirrors no Kubernetes object
    Job.standing.related.set_cached_value(job, None)  # not yet explained
    job.flavor = Flavor(id=4, name="h100")
    job.message = lambda: "called"  # type: ignore[assignment]
    job.image = get_user_model().get_username  # type: ignore[assignment] - needs an argument
    assert read(JobSerializer, job, drf=False) == read(JobSerializer, job, drf=True)
    job.image = "busybox"
    ours = JobSerializer(job).data
    assert ours["message"] == "called" and ours["team"] is None  # team.slug of no team
    assert read(JobSerializer, job, drf=False) == read(JobSerializer, job, drf=True)
