"""A duration as a person types one: plain seconds (5400), a number with a unit (45s, 90m, 2h,
1d, 1.5h), units in a row (1h30m) or H:MM:SS (1:30:00). Shared by the CLI, the dashboard's
form and the API (standard library only)."""

from __future__ import annotations

import re

UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
HINT = "write seconds (5400) or a duration such as 45s, 90m, 2h, 1d, 1h30m or 1:30:00"

_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_CLOCK = re.compile(r"(\d+):([0-5]\d):([0-5]\d)")
# Longer text is no duration and would only cost the regular expressions time.
MAX_CHARS = 40


def parse_duration(text: str) -> int:
    """Whole seconds; ValueError saying how to write one for anything else."""
    typed = text.strip().lower()
    if len(typed) > MAX_CHARS or not typed:
        raise ValueError(f"{text[:MAX_CHARS]!r} is no duration; {HINT}.")
    if typed.isdigit():
        return int(typed)
    clock = _CLOCK.fullmatch(typed)
    if clock:
        hours, minutes, seconds = (int(g) for g in clock.groups())
        return hours * 3600 + minutes * 60 + seconds
    parts = _PART.findall(typed)
    units = [unit for _, unit in parts]
    if parts and "".join(n + u for n, u in parts) == typed and len(set(units)) == len(units):
        return round(sum(float(number) * UNIT_SECONDS[unit] for number, unit in parts))
    raise ValueError(f"{text!r} is no duration; {HINT}.")
