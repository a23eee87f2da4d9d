"""Job (or array) ids as a shell command takes them: several words, each an id (12), a range
(12-20) or a comma list of those (12,15-17). Standard library only."""

from __future__ import annotations

import re

# A range beyond this many ids is more likely a typo (12-1200 for 12-120) than a wish.
MAX_IDS = 10_000
_ITEM = re.compile(r"(\d+)(?:-(\d+))?")


def parse_ids(words: list[str]) -> list[int]:
    """The ids in the order given, each once; ValueError saying how to write them."""
    ids: dict[int, None] = {}
    for word in words:
        for item in word.split(","):
            match = _ITEM.fullmatch(item.strip())
            if not match:
                raise ValueError(f"{item!r}: write ids such as 12, 12-20 or 12,15-17")
            first = int(match.group(1))
            last = int(match.group(2) or first)
            if last < first:
                raise ValueError(f"{item!r}: a range goes up, as {last}-{first}")
            if last - first + 1 + len(ids) > MAX_IDS:
                raise ValueError(f"{item!r}: more than {MAX_IDS} ids at once")
            ids.update(dict.fromkeys(range(first, last + 1)))
    if not ids:
        raise ValueError("name at least one id")
    return list(ids)
