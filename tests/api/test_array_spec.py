"""The array spec parser (pure): whatever form a spec is given in, the text kept for the array
reads back as the same tasks and cap, as a person or `gpuqueue` would read it again."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuqueue.services.jobs.array_spec import ArraySpecError, compact, parse, parse_indices

ranges = st.tuples(st.integers(0, 5_000), st.integers(0, 400), st.integers(1, 9)).map(
    lambda r: f"{r[0]}-{r[0] + r[1]}:{r[2]}" if r[1] else str(r[0])
)
index_texts = st.lists(ranges, min_size=1, max_size=6).map(",".join)
caps = st.none() | st.integers(1, 500)


@given(text=index_texts, cap=caps)
def test_the_kept_text_reads_back_as_the_same_tasks_and_cap(text: str, cap: int | None) -> None:
    try:
        as_fields = parse({"indices": text, "max_concurrent": cap})
    except ArraySpecError:
        return  # over MAX_TASKS: refused, nothing kept
    again = parse(as_fields.text)
    assert (again.indices, again.max_concurrent) == (as_fields.indices, cap)
    assert len(as_fields.text) <= 200  # the column's width


# At most 10 indices below 10,000: any compact form fits the 200 characters a spec may have.
@given(indices=st.sets(st.integers(0, 10_000), min_size=1, max_size=10))
def test_compact_writes_ranges_that_read_back_as_the_same_indices(indices: set[int]) -> None:
    ordered = sorted(indices)
    assert parse_indices(compact(ordered)) == ordered


def test_interleaved_ranges_keep_their_short_form_with_the_cap() -> None:
    spec = parse({"indices": "0-9999:3,1-9999:7", "max_concurrent": 5})
    assert (spec.text, spec.size, spec.max_concurrent) == ("0-9999:3,1-9999:7%5", 4287, 5)
    assert parse({"start": 0, "end": 9, "step": 3, "max_concurrent": 2}).text == "0-9:3%2"
    assert parse({"values": ["a", "b", "c"]}).text == "0-2"


def test_indices_too_long_with_their_cap_are_refused_not_cut() -> None:
    long = ",".join(str(i) for i in range(0, 130, 2))[:198].rstrip(",")
    assert parse({"indices": long}).text == long  # fits alone
    with pytest.raises(ArraySpecError, match="indices and %K: at most 200 characters"):
        parse({"indices": long, "max_concurrent": 500})
