"""Serializers whose fields are bound once per class answer as DRF's own would."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from gpuqueue.api.serializers import JobEventSerializer, JobSerializer
from tests.standings import show


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
    show(job.pk, reason={"code": "no_fit", "numbers": {"needed": 8, "free": 6}, "job_ids": []})
    job.placement = {"n1": 2}
    assert JobSerializer(job).data == drf_built(JobSerializer(job)).data
    assert JobSerializer(job).data["pending_reason_text"]
    events = list(job.events.all())
    assert JobEventSerializer(events, many=True).data == [
        drf_built(JobEventSerializer(e)).data for e in events
    ]


def test_the_representation_shortcut_was_checked_against_the_pinned_drf() -> None:
    """gpuqueue/api/cached_fields.py takes DRF's representation steps with less machinery; a
    new DRF may change them. This fails when the installed DRF is not the version pinned in
    pyproject.toml: check the shortcut against the new version (the tests above and
    tests/api/test_representation.py), then move the pin."""
    import tomllib
    from pathlib import Path

    import rest_framework

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    pins = [d for d in pyproject["project"]["dependencies"] if d.startswith("djangorestframework")]
    assert pins == [f"djangorestframework=={rest_framework.VERSION}"]
