"""A flavor's topology levels: node label keys, outermost first (standard library only).

The same list as Kueue's Topology (`spec.levels[].nodeLabel`) and KAI's Topology CRD
(`spec.levels[].nodeLabel`), so a platform team carries theirs over: a block or spine label, a
rack label, `nvidia.com/gpu.clique` for an NVLink domain, `kubernetes.io/hostname` last. The
engine reads them (gpuqueue/scheduler/topology.py); a job names one of them to require or
prefer all its workers in one domain of it.

    ["network.topology.nvidia.com/spine", "network.topology.nvidia.com/leaf",
     "nvidia.com/gpu.clique", "kubernetes.io/hostname"]

Kueue's form, [{"nodeLabel": "..."}, ...], is taken as well and stored as the keys alone.
"""

from __future__ import annotations

import re
from typing import Any

HOSTNAME = "kubernetes.io/hostname"
MAX_LEVELS = 16  # as many as Kueue's Topology allows
MAX_KEY_CHARS = 317  # a 253-character prefix, '/', a 63-character name

_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def normalized(levels: Any) -> Any:
    """Kueue's [{"nodeLabel": key}] as [key]; anything else as given (for `level_errors`)."""
    if isinstance(levels, list):
        return [
            level["nodeLabel"] if isinstance(level, dict) and set(level) == {"nodeLabel"} else level
            for level in levels
        ]
    return levels


def key_errors(key: str) -> list[str]:
    """A node label key: an optional DNS subdomain prefix and '/', a name of 1-63 characters."""
    prefix, slash, name = key.rpartition("/")
    errors = []
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        errors.append(
            f"Level {key!r}: the prefix before '/' must be a DNS subdomain (lowercase letters, "
            "digits, '-' and '.', at most 253 characters)."
        )
    if not name or len(name) > 63 or not _NAME.match(name):
        errors.append(
            f"Level {key!r}: the name must be 1–63 letters, digits, '-', '_' or '.', starting "
            "and ending with a letter or digit."
        )
    return errors


def level_errors(levels: Any) -> list[str]:
    """A list of distinct node label keys, at most MAX_LEVELS, the hostname last if there."""
    if not isinstance(levels, list) or not all(isinstance(k, str) for k in levels):
        return [
            'A list of node label keys, outermost first, e.g. ["example.com/block", '
            f'"example.com/rack", "{HOSTNAME}"] (or Kueue\'s [{{"nodeLabel": …}}]).'
        ]
    errors: list[str] = []
    if len(levels) > MAX_LEVELS:
        errors.append(f"At most {MAX_LEVELS} levels; got {len(levels)}.")
    for key in levels:
        errors.extend(key_errors(key))
    repeated = sorted({k for k in levels if levels.count(k) > 1})
    if repeated:
        errors.append(f"Each level once: {', '.join(repeated)} is given more than once.")
    if HOSTNAME in levels and levels[-1] != HOSTNAME:
        errors.append(f"{HOSTNAME} is the innermost level: put it last.")
    return errors


def job_level_errors(level: str, levels: list[str], flavor: str) -> list[str]:
    """A job's level is one of its flavor's."""
    if not level or level in levels:
        return []
    if not levels:
        return [f"Flavor {flavor} has no topology levels."]
    return [f"Flavor {flavor}'s topology levels are {', '.join(levels)}; got {level!r}."]
