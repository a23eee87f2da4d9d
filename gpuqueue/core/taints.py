"""Node taints and flavor tolerations, with Kubernetes' own matching rules (standard library only).

A taint is a mapping {key, value, effect}; a toleration a mapping {key, operator, value,
effect}, as in the Kubernetes API. `tolerates` is `Toleration.ToleratesTaint` of
k8s.io/api/core/v1, and `schedulable_for` is the scheduler's TaintToleration filter: only
NoSchedule and NoExecute taints keep pods off a node, PreferNoSchedule never does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

EQUAL, EXISTS = "Equal", "Exists"
NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "PreferNoSchedule", "NoExecute"
EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
# Taints with these effects keep a pod that does not tolerate them off the node.
BLOCKING_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})
TOLERATION_FIELDS = ("key", "operator", "value", "effect")

# apimachinery's IsQualifiedName (keys) and IsValidLabelValue (values).
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def tolerates(toleration: Mapping[str, str], taint: Mapping[str, str]) -> bool:
    """Whether one toleration tolerates one taint.

    An empty effect matches every effect and an empty key every key; the operator Exists
    ignores the value, Equal (also meant by an empty operator) compares it. An unknown operator
    tolerates nothing.
    """
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or EQUAL
    if operator == EXISTS:
        return True
    if operator == EQUAL:
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def schedulable_for(
    taints: Iterable[Mapping[str, str]], tolerations: Iterable[Mapping[str, str]]
) -> bool:
    """Whether pods with `tolerations` may be placed on a node with `taints`: every NoSchedule
    and NoExecute taint is tolerated by at least one toleration."""
    tolerations = list(tolerations)
    return all(
        any(tolerates(toleration, taint) for toleration in tolerations)
        for taint in taints
        if taint.get("effect") in BLOCKING_EFFECTS
    )


def toleration_errors(tolerations: object) -> list[str]:
    """What is wrong with a list of tolerations as a flavor stores it, one sentence per fault
    (empty when it is valid). The rules are the Kubernetes API server's, so that a flavor the
    admin accepts never gets its pods refused."""
    if not isinstance(tolerations, list):
        return ["Tolerations must be a list of objects with key, operator, value and effect."]
    errors: list[str] = []
    for number, toleration in enumerate(tolerations, start=1):
        errors.extend(f"Toleration {number}: {fault}" for fault in _faults(toleration))
    return errors


def _faults(toleration: object) -> list[str]:
    if not isinstance(toleration, dict):
        return ["must be an object with key, operator, value and effect."]
    unknown = sorted(str(name) for name in toleration if name not in TOLERATION_FIELDS)
    if unknown:
        return [
            f"unknown field {', '.join(repr(u) for u in unknown)}; "
            f"the fields are {', '.join(TOLERATION_FIELDS)}."
        ]
    not_text = [name for name in TOLERATION_FIELDS if not isinstance(toleration.get(name, ""), str)]
    if not_text:
        return [f"{', '.join(not_text)} must be text."]
    key, value = toleration.get("key", ""), toleration.get("value", "")
    operator, effect = toleration.get("operator", "") or EQUAL, toleration.get("effect", "")
    faults: list[str] = []
    if operator not in (EQUAL, EXISTS):
        faults.append(f"operator {operator!r} is not one of Equal, Exists.")
    if effect and effect not in EFFECTS:
        faults.append(
            f"effect {effect!r} is not one of {', '.join(EFFECTS)} (or empty for every effect)."
        )
    if not key and operator != EXISTS:
        faults.append("a toleration without a key must use the operator Exists.")
    if operator == EXISTS and value:
        faults.append(f"the operator Exists takes no value (got {value!r}).")
    if key:
        faults.extend(_key_faults(key))
    if value and (len(value) > 63 or not _VALUE.match(value)):
        faults.append(
            f"value {value!r} must be at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit."
        )
    return faults


def _key_faults(key: str) -> list[str]:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return [f"key {key!r}: the prefix before '/' must be a DNS subdomain."]
    if len(name) > 63 or not _NAME.match(name):
        return [
            f"key {key!r}: the name must be at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit."
        ]
    return []
