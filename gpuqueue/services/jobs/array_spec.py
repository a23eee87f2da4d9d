"""The indices of a job array, as Slurm writes them (`0-999%50`, `1,3,8-15:2%4`) or as fields
(start, end, step, max_concurrent), with an optional value per task. Pure: the API and the
dashboard parse here, the submission writes what comes out."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# One request writes every task in one statement; 10,000 answer within 2 s
# (benchmarks/array_submit.py). Slurm's default MaxArraySize is 1,001.
MAX_TASKS = 10_000
MAX_INDEX = 1_000_000
MAX_VALUE_CHARS = 1_000
MAX_SPEC_CHARS = 200

_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


class ArraySpecError(ValueError):
    """A spec that cannot be read; the message says what to write instead."""


@dataclass(frozen=True, slots=True)
class ArraySpec:
    indices: tuple[int, ...]  # ascending, each once
    max_concurrent: int | None  # %K: the most tasks holding GPUs at once
    values: tuple[str, ...] | None  # one per index, in the same order
    text: str  # the indices as Slurm would write them, e.g. "0-999%50"

    @property
    def size(self) -> int:
        return len(self.indices)


def parse(given: Any) -> ArraySpec:
    """A spec from a string (`0-9:3%2`), or a mapping with `indices` (such a string) or
    `start`/`end`/`step`, and `max_concurrent` and `values`, any of them optional but
    `values` alone meaning indices 0 to len - 1."""
    if isinstance(given, str):
        indices, cap = _parse_text(given)
        return _checked(indices, cap, None, given.strip())
    if not isinstance(given, Mapping):
        raise ArraySpecError('Must be a string such as "0-999%50" or an object.')
    unknown = set(given) - {"indices", "start", "end", "step", "max_concurrent", "values"}
    if unknown:
        raise ArraySpecError(f"Unknown field(s): {', '.join(sorted(unknown))}.")
    values = given.get("values")
    if values is not None:
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ArraySpecError("values: must be a list of strings.")
        if any(len(v) > MAX_VALUE_CHARS for v in values):
            raise ArraySpecError(f"values: each at most {MAX_VALUE_CHARS} characters.")
    cap = _whole(given, "max_concurrent", lowest=1)
    text = None  # None: written from the indices by `compact`
    if "indices" in given:
        if not isinstance(given["indices"], str) or {"start", "end", "step"} & set(given):
            raise ArraySpecError("indices: a string such as 0-999, without start, end or step.")
        indices, in_text = _parse_text(given["indices"])
        if in_text is not None and cap is not None:
            raise ArraySpecError("Give %K in indices or max_concurrent, not both.")
        # As given: a short spec of interleaved ranges can compact to far more than fits.
        text = given["indices"].strip() + (f"%{cap}" if in_text is None and cap else "")
        if len(text) > MAX_SPEC_CHARS:
            raise ArraySpecError(f"indices and %K: at most {MAX_SPEC_CHARS} characters.")
        cap = cap if cap is not None else in_text
    elif "start" in given or "end" in given:
        start = _whole(given, "start", lowest=0)
        end = _whole(given, "end", lowest=0)
        step = _whole(given, "step", lowest=1) or 1
        if start is None or end is None:
            raise ArraySpecError("start and end: both, or neither.")
        if end < start:
            raise ArraySpecError(f"end ({end}) is below start ({start}).")
        _check_span(start, end, step)
        indices = list(range(start, end + 1, step))
    elif values is not None:
        indices = list(range(len(values)))
    else:
        raise ArraySpecError("Give indices, start and end, or values.")
    if values is not None and len(values) != len(indices):
        raise ArraySpecError(f"values: {len(values)} given for {len(indices)} tasks; one each.")
    return _checked(indices, cap, values, text)


def parse_indices(text: str) -> list[int]:
    """Indices alone (`0-9,20`), as a request to cancel some tasks names them."""
    indices, cap = _parse_text(text)
    if cap is not None:
        raise ArraySpecError("Indices only, without %K.")
    return indices


def _whole(given: Mapping[str, Any], key: str, *, lowest: int) -> int | None:
    value = given.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ArraySpecError(f"{key}: a whole number, at least {lowest}.")
    return value


def _check_span(start: int, end: int, step: int) -> None:
    if end > MAX_INDEX:
        raise ArraySpecError(f"Index {end} is over the largest allowed, {MAX_INDEX}.")
    if (end - start) // step + 1 > MAX_TASKS:
        raise ArraySpecError(f"At most {MAX_TASKS} tasks in one array.")


def _parse_text(text: str) -> tuple[list[int], int | None]:
    text = text.strip()
    if not text or len(text) > MAX_SPEC_CHARS:
        raise ArraySpecError(f"Indices such as 0-999%50, at most {MAX_SPEC_CHARS} characters.")
    ranges, sep, cap_text = text.partition("%")
    cap = None
    if sep:
        if not cap_text.isdigit() or int(cap_text) < 1:
            raise ArraySpecError(f"After % a whole number of at least 1, not {cap_text!r}.")
        cap = int(cap_text)
    indices: set[int] = set()
    for part in ranges.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise ArraySpecError(
                f"{part.strip()!r} is not an index or a range: write 7, 0-999 or 0-999:2."
            )
        start = int(match[1])
        end = int(match[2]) if match[2] is not None else start
        step = int(match[3]) if match[3] is not None else 1
        if end < start or step < 1:
            raise ArraySpecError(f"{part.strip()!r}: the end below the start, or a zero step.")
        _check_span(start, end, step)
        indices.update(range(start, end + 1, step))
        if len(indices) > MAX_TASKS:
            raise ArraySpecError(f"At most {MAX_TASKS} tasks in one array.")
    return sorted(indices), cap


def _checked(
    indices: Sequence[int], cap: int | None, values: Sequence[str] | None, text: str | None
) -> ArraySpec:
    if not indices:
        raise ArraySpecError("No tasks.")
    if len(indices) > MAX_TASKS:
        raise ArraySpecError(f"At most {MAX_TASKS} tasks in one array; got {len(indices)}.")
    if indices[-1] > MAX_INDEX:
        raise ArraySpecError(f"Index {indices[-1]} is over the largest allowed, {MAX_INDEX}.")
    shown = text if text is not None else compact(indices)
    if text is None and cap is not None:
        shown += f"%{cap}"
    return ArraySpec(
        indices=tuple(indices),
        max_concurrent=cap,
        values=tuple(values) if values is not None else None,
        text=shown[:MAX_SPEC_CHARS],
    )


def compact(indices: Sequence[int]) -> str:
    """Ascending indices as ranges: [0, 1, 2, 5, 7, 9] -> "0-2,5-9:2" (steps kept when
    regular)."""
    parts: list[str] = []
    i = 0
    while i < len(indices):
        start = indices[i]
        if i + 1 == len(indices):
            parts.append(str(start))
            break
        step = indices[i + 1] - start
        j = i + 1
        while j + 1 < len(indices) and indices[j + 1] - indices[j] == step:
            j += 1
        if j == i + 1 and step != 1:
            parts.append(str(start))
            i += 1
            continue
        end = indices[j]
        parts.append(f"{start}-{end}" + (f":{step}" if step != 1 else ""))
        i = j + 1
    return ",".join(parts)
