"""How durations are read wherever a person types one (CLI, form, API)."""

from __future__ import annotations

import pytest

from gpuqueue.client.durations import parse_duration

READ = [
    ("plain seconds", "5400", 5400),
    ("seconds with a unit", "45s", 45),
    ("minutes", "90m", 5400),
    ("hours", "2h", 7200),
    ("a day", "1d", 86400),
    ("a fraction of an hour", "1.5h", 5400),
    ("units in a row", "1h30m", 5400),
    ("a day and hours", "1d2h", 93600),
    ("a clock", "1:30:00", 5400),
    ("a clock past a day", "26:00:05", 93605),
    ("capitals and spaces around", " 2H ", 7200),
    ("zero", "0", 0),
]

REFUSED = [
    ("letters", "abc"),
    ("an unknown unit", "2w"),
    ("a unit twice", "1h1h"),
    ("minutes and seconds only", "1:30"),
    ("minutes past 59 on a clock", "1:75:00"),
    ("a negative number", "-5"),
    ("a space inside", "1h 30m"),
    ("nothing", ""),
    ("a unit alone", "h"),
    ("a very long text", "1" * 100 + "h"),
]


@pytest.mark.parametrize(("name", "text", "seconds"), READ, ids=[r[0] for r in READ])
def test_a_duration_is_read_as_whole_seconds(name: str, text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("name", "text"), REFUSED, ids=[r[0] for r in REFUSED])
def test_anything_else_is_refused_saying_how_to_write_one(name: str, text: str) -> None:
    with pytest.raises(ValueError, match="no duration; write seconds .* 90m, 2h"):
        parse_duration(text)
