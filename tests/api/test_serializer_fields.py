"""Serializers whose fields are built (or bound) once per class answer as DRF's own would."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from gpuqueue.api.serializers import JobEventSerializer, JobSerializer, JobSubmitSerializer


def drf_built(serializer: serializers.Serializer) -> serializers.Serializer:
    """The same serializer with fields built and bound by DRF itself, for this instance."""
    serializer.__dict__["fields"] = serializers.Serializer.fields.func(serializer)  # type: ignore[attr-defined]
    return serializer


def test_a_job_and_its_events_read_the_same_as_with_drfs_own_fields(
    world: Any, submit: Any
) -> None:
    job = submit(
        env={"A": "1"},
        labels={"x": "y"},
        command=["python", "t.py"],
        expected_runtime_seconds=60,
        key="k",
    )
    job.pending_reason = {"code": "no_fit", "numbers": {"needed": 8, "free": 6}, "job_ids": []}
    job.placement = {"n1": 2}
    assert JobSerializer(job).data == drf_built(JobSerializer(job)).data
    assert JobSerializer(job).data["pending_reason_text"]
    events = list(job.events.all())
    assert JobEventSerializer(events, many=True).data == [
        drf_built(JobEventSerializer(e)).data for e in events
    ]


def test_submissions_validate_the_same_as_with_drfs_own_fields(world: Any) -> None:
    from rest_framework.test import APIRequestFactory

    request = APIRequestFactory().post("/")
    request.user = world.alice
    bad = {"team": "team-b", "flavor": "nope", "image": 5, "workers": 0, "gpus": 1}
    good = {"flavor": "h100", "image": "ghcr.io/acme/train:1", "workers": 2}
    for body in (bad, good):
        ours = JobSubmitSerializer(data=body, context={"request": request})
        theirs = drf_built(JobSubmitSerializer(data=body, context={"request": request}))
        assert ours.is_valid() == theirs.is_valid()
        assert ours.errors == theirs.errors
    assert not JobSubmitSerializer(data=bad, context={"request": request}).is_valid()


def test_a_built_field_is_copied_as_copy_copy_would() -> None:
    """`shallow_copy` skips `copy.copy`'s protocol, which is only the same for classes that
    do not customise it."""
    import copy

    from gpuqueue.api.cached_fields import shallow_copy

    JobSubmitSerializer(data={}).fields  # noqa: B018 - builds the class's fields
    built = JobSubmitSerializer._built_fields  # type: ignore[attr-defined]
    assert len(built) == 15
    for name, field in built.items():
        for cls in type(field).__mro__:
            assert "__slots__" not in vars(cls) or cls is object, (name, cls)
            assert not {"__copy__", "__setstate__", "__reduce_ex__"} & set(vars(cls)) or (
                cls is object
            ), (name, cls)
        ours, theirs = shallow_copy(field), copy.copy(field)
        assert type(ours) is type(theirs) and ours is not field
        assert vars(ours) == vars(theirs), name
