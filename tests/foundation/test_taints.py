"""Taints and tolerations match as Kubernetes matches them (gpuqueue/core/taints.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuqueue.core.taints import schedulable_for, tolerates, toleration_errors


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def tol(
    key: str = "", operator: str = "Equal", value: str = "", effect: str = ""
) -> dict[str, str]:
    return {"key": key, "operator": operator, "value": value, "effect": effect}


@dataclass(frozen=True)
class Case:
    name: str
    toleration: dict[str, str]
    taint: dict[str, str]
    want: bool


CASES = [
    Case(
        "an empty key with Exists tolerates every taint", tol("", "Exists"), taint("x", "y"), True
    ),
    Case(
        "an empty key with Exists tolerates every effect too",
        tol("", "Exists"),
        taint("x", effect="NoExecute"),
        True,
    ),
    Case(
        "an empty key with Exists and an effect tolerates only that effect",
        tol("", "Exists", effect="NoExecute"),
        taint("x", effect="NoSchedule"),
        False,
    ),
    Case(
        "Equal with the same key and value tolerates", tol("a", "Equal", "1"), taint("a", "1"), True
    ),
    Case("Equal with another value does not", tol("a", "Equal", "1"), taint("a", "2"), False),
    Case("Equal with no value matches a taint with none", tol("a"), taint("a"), True),
    Case("Equal with no value does not match a taint with one", tol("a"), taint("a", "1"), False),
    Case("an empty operator means Equal", tol("a", "", "1"), taint("a", "1"), True),
    Case(
        "an empty operator compares values as Equal does", tol("a", "", "1"), taint("a", "2"), False
    ),
    Case("Exists ignores the taint's value", tol("a", "Exists"), taint("a", "anything"), True),
    Case("Exists ignores a value it was given", tol("a", "Exists", "1"), taint("a", "2"), True),
    Case("another key is not tolerated", tol("a", "Exists"), taint("b"), False),
    Case("an empty effect matches NoSchedule", tol("a", "Exists"), taint("a"), True),
    Case(
        "an empty effect matches PreferNoSchedule",
        tol("a", "Exists"),
        taint("a", effect="PreferNoSchedule"),
        True,
    ),
    Case(
        "an empty effect matches NoExecute",
        tol("a", "Exists"),
        taint("a", effect="NoExecute"),
        True,
    ),
    Case(
        "an effect matches only the same effect",
        tol("a", "Exists", effect="NoSchedule"),
        taint("a", effect="NoExecute"),
        False,
    ),
    Case(
        "the same effect is tolerated",
        tol("a", "Equal", "1", "NoExecute"),
        taint("a", "1", "NoExecute"),
        True,
    ),
    Case("an unknown operator tolerates nothing", tol("a", "Matches", "1"), taint("a", "1"), False),
    Case(
        "an empty key with Equal matches any key with the same value (as Kubernetes does)",
        tol("", "Equal", "1"),
        taint("zz", "1"),
        True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_tolerates(case: Case) -> None:
    assert tolerates(case.toleration, case.taint) is case.want


def test_missing_fields_read_as_empty() -> None:
    assert tolerates({"operator": "Exists"}, {"key": "a", "effect": "NoSchedule"})
    assert tolerates({"key": "a"}, {"key": "a", "effect": "NoSchedule"})


GPU = tol("nvidia.com/gpu", "Exists")


@pytest.mark.parametrize(
    ("name", "taints", "tolerations", "want"),
    [
        ("an untainted node takes anyone", [], [], True),
        ("a NoSchedule taint blocks the untolerating", [taint("dedicated", "ml")], [GPU], False),
        ("a NoExecute taint blocks the untolerating", [taint("x", effect="NoExecute")], [], False),
        ("PreferNoSchedule never blocks", [taint("x", effect="PreferNoSchedule")], [], True),
        (
            "a taint with no effect Kubernetes knows does not block",
            [taint("x", effect="")],
            [],
            True,
        ),
        (
            "the GPU taint is tolerated by the GPU toleration",
            [taint("nvidia.com/gpu", "present")],
            [GPU],
            True,
        ),
        (
            "every blocking taint must be tolerated, not just one",
            [taint("nvidia.com/gpu"), taint("dedicated", "ml")],
            [GPU],
            False,
        ),
        (
            "each blocking taint tolerated by some toleration",
            [taint("nvidia.com/gpu"), taint("dedicated", "ml", "NoExecute")],
            [GPU, tol("dedicated", "Equal", "ml")],
            True,
        ),
    ],
)
def test_schedulable_for(
    name: str, taints: list[dict[str, str]], tolerations: list[dict[str, str]], want: bool
) -> None:
    assert schedulable_for(taints, tolerations) is want, name


keys = st.sampled_from(["", "a", "b", "nvidia.com/gpu"])
values = st.sampled_from(["", "1", "2"])
effects = st.sampled_from(["", "NoSchedule", "PreferNoSchedule", "NoExecute"])
operators = st.sampled_from(["", "Equal", "Exists"])
taints_st = st.builds(taint, keys.filter(bool), values, effects.filter(bool))
tolerations_st = st.builds(tol, keys, operators, values, effects)


@given(st.lists(taints_st, max_size=4), st.lists(tolerations_st, max_size=3), tolerations_st)
def test_more_tolerations_never_make_a_node_unusable(
    taints: list[dict[str, str]], tolerations: list[dict[str, str]], extra: dict[str, str]
) -> None:
    if schedulable_for(taints, tolerations):
        assert schedulable_for(taints, [*tolerations, extra])


@given(st.lists(taints_st, max_size=4), st.lists(tolerations_st, max_size=3))
def test_prefer_no_schedule_taints_never_matter(
    taints: list[dict[str, str]], tolerations: list[dict[str, str]]
) -> None:
    blocking = [t for t in taints if t["effect"] != "PreferNoSchedule"]
    assert schedulable_for(taints, tolerations) == schedulable_for(blocking, tolerations)


@given(taints_st, keys, values, effects)
def test_exists_is_equal_with_any_value(
    taint_: dict[str, str], key: str, value: str, effect: str
) -> None:
    """Exists tolerates exactly what Equal tolerates for some value of the taint's."""
    exists = tolerates(tol(key, "Exists", "", effect), taint_)
    assert exists == tolerates(tol(key, "Equal", taint_["value"], effect), taint_)
    assert tolerates(tol(key, "Equal", value, effect), taint_) <= exists


@given(st.lists(taints_st, max_size=4))
def test_tolerate_everything_takes_every_node(taints: list[dict[str, str]]) -> None:
    assert schedulable_for(taints, [tol("", "Exists")])


# --- Validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tolerations",
    [
        [],
        [tol("dedicated", "Equal", "ml", "NoSchedule")],
        [{"key": "dedicated", "operator": "Exists"}],
        [{"operator": "Exists"}],
        [{"key": "example.com/team", "value": "a", "effect": "NoExecute"}],
    ],
)
def test_valid_tolerations_have_no_errors(tolerations: list[dict[str, str]]) -> None:
    assert toleration_errors(tolerations) == []


@pytest.mark.parametrize(
    ("tolerations", "error"),
    [
        ({"key": "a"}, "Tolerations must be a list"),
        (["a"], "Toleration 1: must be an object"),
        ([{"key": "a", "tolerationSeconds": 5}], "Toleration 1: unknown field 'tolerationSeconds'"),
        ([{"key": "a", "value": 1}], "Toleration 1: value must be text."),
        (
            [{"key": "a", "operator": "In"}],
            "Toleration 1: operator 'In' is not one of Equal, Exists.",
        ),
        (
            [{"key": "a", "effect": "NoRun"}],
            "Toleration 1: effect 'NoRun' is not one of NoSchedule",
        ),
        (
            [{"value": "1"}],
            "Toleration 1: a toleration without a key must use the operator Exists.",
        ),
        ([{"key": "a", "operator": "Exists", "value": "1"}], "the operator Exists takes no value"),
        ([{"key": "bad key"}], "Toleration 1: key 'bad key': the name must be"),
        ([{"key": "Bad_Prefix/a"}], "the prefix before '/' must be a DNS subdomain"),
        ([{"key": "a", "value": "x" * 64}], "must be at most 63"),
        ([{"key": "a"}, {"key": "b", "operator": "Nope"}], "Toleration 2: operator 'Nope'"),
    ],
)
def test_invalid_tolerations_say_what_is_wrong(tolerations: object, error: str) -> None:
    errors = toleration_errors(tolerations)
    assert len(errors) == 1 and error in errors[0], errors
