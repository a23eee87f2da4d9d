"""How `gpuqueue cancel` reads the ids it is given."""

from __future__ import annotations

import pytest

from gpuqueue.client.job_ids import parse_ids

READ = [
    ("one id", ["12"], [12]),
    ("several words", ["12", "15"], [12, 15]),
    ("a range, both ends kept", ["12-15"], [12, 13, 14, 15]),
    ("a comma list of ids and ranges", ["12,15-16"], [12, 15, 16]),
    ("ids and ranges mixed over words", ["20", "3-4", "7"], [20, 3, 4, 7]),
    ("an id named twice counts once", ["12", "11-13"], [12, 11, 13]),
    ("a range of one", ["9-9"], [9]),
]

REFUSED = [
    ("a range going down", ["20-12"], "a range goes up"),
    ("letters", ["abc"], "write ids such as 12, 12-20"),
    ("an open range", ["12-"], "write ids such as"),
    ("a negative id", ["-3"], "write ids such as"),
    ("a huge range", ["1-100000"], "more than 10000 ids"),
    ("nothing", [], "at least one id"),
]


@pytest.mark.parametrize(("name", "words", "ids"), READ, ids=[r[0] for r in READ])
def test_ids_are_read_in_order_each_once(name: str, words: list[str], ids: list[int]) -> None:
    assert parse_ids(words) == ids


@pytest.mark.parametrize(("name", "words", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_anything_else_is_refused_saying_how(name: str, words: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_ids(words)
