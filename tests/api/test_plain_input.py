"""A submission body of plain values is validated without DRF's per-field steps
(gpuqueue/api/plain_input.py), with the same answer as DRF's own path: the same validated data
(values and types, key order included) or, for everything else, DRF's own errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from gpuqueue.api.plain_input import plain_internal_value
from gpuqueue.api.serializers import JobSubmitSerializer


class DrfOnly(JobSubmitSerializer):
    """The submission serializer validated by DRF's own path only."""

    def run_validation(self, data: Any = serializers.empty) -> Any:
        return serializers.Serializer.run_validation(self, data)


def typed(value: Any) -> Any:
    """`value` with the type of everything in it, so that 1 and True, or a list and a tuple,
    do not compare equal."""
    if isinstance(value, dict):
        return (type(value), [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value), [typed(v) for v in value])
    return (type(value), value)


def outcome(serializer_class: type, body: Any, request: Any) -> Any:
    serializer = serializer_class(data=body, context={"request": request})
    if serializer.is_valid():
        return ("valid", typed(dict(serializer.validated_data)))
    return ("invalid", serializer.errors)


@pytest.fixture
def requests(world: Any, nodes: Any) -> dict[str, Any]:
    from rest_framework.test import APIRequestFactory

    made = {}
    for persona in ("alice", "carol", "root"):
        request = APIRequestFactory().post("/api/v1/jobs/")
        request.user = getattr(world, persona)
        made[persona] = request
    return made


PLAIN = {
    "flavor": "h100",
    "image": "ghcr.io/acme/train:1",
    "name": "bench",
    "workers": 1,
    "gpus_per_worker": 1,
    "command": ["python", "train.py"],
}
FULL = {
    **PLAIN,
    "team": "team-a",
    "env": {"LR": "0.1", "EMPTY": ""},
    "labels": {"app": "train"},
    "annotations": {"example.com/note": "a note\twith a tab"},
    "priority": -3,
    "preemptible": False,
    "checkpoint_grace_seconds": 0,
    "max_runtime_seconds": None,
    "expected_runtime_seconds": 3600,
}


def test_plain_bodies_take_the_plain_path_with_drfs_answer(requests: dict[str, Any]) -> None:
    for body in (PLAIN, FULL, {"flavor": "l4", "image": "busybox"}):
        serializer = JobSubmitSerializer(data=body, context={"request": requests["alice"]})
        assert plain_internal_value(serializer, body) is not None, body
        assert outcome(JobSubmitSerializer, body, requests["alice"]) == outcome(
            DrfOnly, body, requests["alice"]
        )


def test_what_is_not_plain_goes_drfs_way(requests: dict[str, Any]) -> None:
    context = {"request": requests["alice"]}
    for body in (
        {**PLAIN, "workers": True},  # a bool is no integer here
        {**PLAIN, "workers": 2.0},
        {**PLAIN, "image": ""},
        {**PLAIN, "command": ["a\x00b"]},
        {**PLAIN, "command": ("python",)},
        {**PLAIN, "env": {"A": 1}},
        {**PLAIN, "gpus": 1},  # unknown
        {**PLAIN, "team": "team-b"},  # not alice's
        {**PLAIN, "flavor": "nope"},
        {**PLAIN, "workers": 0},
        {**PLAIN, "workers": None},
        [PLAIN],
    ):
        serializer = JobSubmitSerializer(data=body, context=context)
        assert plain_internal_value(serializer, body) is None, body


# Values around the rules: plain and not, valid and not, for every field.
TEXT = st.text(max_size=8) | st.sampled_from(["", " ", "a\x00", "\ud800", "é", " x ", "x" * 70])
INTS = (
    st.integers(-1100, 1100)
    | st.sampled_from([0, 1, 64, 65, 1024, 1025, 86400, 86401, 2592000, 2592001, 10**20])
    | st.sampled_from([True, False, None, 1.0, "1", [1]])
)
STRINGS = st.sampled_from([None, 5, ["x"], {"x": 1}]) | TEXT
STRING_LISTS = st.lists(STRINGS, max_size=3) | st.sampled_from([None, "python", {"a": "b"}])
STRING_DICTS = st.dictionaries(
    st.sampled_from(["A", "LR", "1X", "GPUQUEUE_X", "app", "example.com/x", "bad key", ""]),
    STRINGS,
    max_size=3,
) | st.sampled_from([None, [], "A=1"])
FIELDS = {
    "team": st.sampled_from(["team-a", "team-b", "nope", "", " ", " team-a", 5, None]),
    "flavor": st.sampled_from(["h100", "l4", "nope", "", " h100", None, 1]),
    "name": st.sampled_from(["train", "a" * 63, "a" * 64, "-x", "x.y_z"]) | STRINGS,
    "image": st.sampled_from(["ghcr.io/acme/train:1", "busybox", "Busybox", "a b"]) | STRINGS,
    "command": STRING_LISTS,
    "env": STRING_DICTS,
    "labels": STRING_DICTS,
    "annotations": STRING_DICTS,
    "workers": INTS,
    "gpus_per_worker": INTS,
    "priority": INTS,
    "preemptible": st.sampled_from([True, False, None, 1, "true"]),
    "checkpoint_grace_seconds": INTS,
    "max_runtime_seconds": INTS,
    "expected_runtime_seconds": INTS,
    "gpus": st.just(1),  # unknown
}


@st.composite
def bodies(draw: Any) -> dict[str, Any]:
    body = dict(PLAIN)
    for name in draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=4, unique=True)):
        body[name] = draw(FIELDS[name])
    for name in draw(st.lists(st.sampled_from(sorted(PLAIN)), max_size=2, unique=True)):
        body.pop(name, None)
    return body


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies(), persona=st.sampled_from(["alice", "carol", "root"]))
def test_the_same_answer_as_drfs_own_path(
    requests: dict[str, Any], body: dict[str, Any], persona: str
) -> None:
    request = requests[persona]
    assert outcome(JobSubmitSerializer, body, request) == outcome(DrfOnly, body, request)
