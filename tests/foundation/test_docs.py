"""The docs and the code say what is, inside the repository: no history, no pointers outside it.

What is checked, over docs/**/*.md, README.md and every .py under gpuqueue/, teams/, dashboard/,
tests/ and benchmarks/ (this file excepted, since it spells out what it looks for):

- No commit hash: a lowercase hexadecimal token of 7 to 40 characters that holds at least one
  letter and one digit, standing alone (not part of a longer word, number, path or UUID: the
  character before it is none of letter, digit, `_`, `-`, `.`, `#`, `/`, and the one after it
  none of letter, digit, `_`, `-`, `/`). So CSS colours (`#1f77b4`), hex literals (`0x…`),
  UUIDs, SHA-256 digests (64 characters) and team ids of six characters are not hashes.
- No issue number: "issue 12", "issues 12", "issue #12", "PR #12", "(#12)". A job id such as
  "job #12" in a pending reason is not one.
- No citation of the design, scenario or style notes that live outside the repository; their
  content is docs/architecture.md.
- docs/benchmarks.md is under 600 lines: today's tables, with history left to git.
- Every relative link of a Markdown file resolves to a file, and its anchor, if any, to a
  heading of that file; every quoted section a doc or a comment cites (`docs/benchmarks.md,
  "What each rule costs"`) begins a heading of that doc.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("gpuqueue", "teams", "dashboard", "tests", "benchmarks")
MAX_BENCHMARK_LINES = 600

HASH = re.compile(r"(?<![0-9A-Za-z_.#/-])[0-9a-f]{7,40}(?![0-9A-Za-z_/-])")
ISSUE = re.compile(r"\bissues?\s+#?\d+|\bPR\s*#\d+|\(#\d+\)", re.IGNORECASE)
OUTSIDE_NOTES = re.compile(r"\b(?:DESIGN|SCENARIOS|STYLE)\.md\b")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
# `docs/benchmarks.md, "Section"`, `docs/api.md ("Section")`, `benchmarks.md, "Section`: a
# doc's name, then a quoted section name (line breaks and comment markers already joined).
# Something must stand between the name and the quote: `"kubernetes.md"` closes a string.
SECTION_CITATION = re.compile(r"\b([a-z]+)\.md(?:[,:]\s*|\s+)\(?\"([^\"()]{3,100})\"")


def scanned_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in CODE_FOLDERS:
        files += sorted((ROOT / folder).rglob("*.py"))
    this = Path(__file__).resolve()
    return [f for f in files if f.resolve() != this and ".venv" not in f.parts]


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def findings(pattern: re.Pattern[str], keep: Callable[[str], bool] | None = None) -> list[str]:
    found = []
    for path in scanned_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in pattern.finditer(line):
                if keep is None or keep(match.group(0)):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)}")
    return found


def looks_like_a_hash(token: str) -> bool:
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


def prose_lines(text: str) -> Iterator[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [
        m.group(2)
        for line in prose_lines(path.read_text(encoding="utf-8"))
        if (m := HEADING.match(line))
    ]


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for heading in headings(path):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def plain(heading: str) -> str:
    return re.sub(r"[`*_]", "", heading).strip().lower()


def test_no_commit_hash_in_docs_or_code() -> None:
    assert findings(HASH, looks_like_a_hash) == []


def test_no_issue_number_in_docs_or_code() -> None:
    assert findings(ISSUE) == []


def test_no_citation_of_notes_outside_the_repository() -> None:
    assert findings(OUTSIDE_NOTES) == []
    assert (ROOT / "docs" / "architecture.md").is_file()


def test_the_benchmarks_page_gives_todays_tables_in_under_600_lines() -> None:
    lines = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < MAX_BENCHMARK_LINES


def test_every_relative_link_resolves_to_a_file_and_a_heading() -> None:
    broken = []
    for path in markdown_files():
        for line in prose_lines(path.read_text(encoding="utf-8")):
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"[a-z]+:", target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                linked = (path.parent / file_part).resolve() if file_part else path
                if not linked.exists():
                    broken.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
                elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                    broken.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_every_cited_section_of_a_doc_exists() -> None:
    docs = {p.stem: p for p in markdown_files()}
    missing = []
    for path in scanned_files():
        # A citation may run over a line break, and in code over comment markers.
        text = re.sub(r"\n\s*(?:#\s*)?", " ", path.read_text(encoding="utf-8"))
        for name, section in SECTION_CITATION.findall(text):
            if name not in docs:
                continue
            wanted = plain(" ".join(section.split()))
            if not any(plain(h).startswith(wanted) for h in headings(docs[name])):
                missing.append(f'{path.relative_to(ROOT)}: {name}.md, "{section}"')
    assert missing == []


def test_the_rules_catch_what_they_describe() -> None:
    """The patterns themselves, on lines that must and must not count."""
    hashes = [m.group(0) for m in HASH.finditer("measured on 5f1d4c5 and deadbeef0123abcd.")]
    assert [h for h in hashes if looks_like_a_hash(h)] == ["5f1d4c5", "deadbeef0123abcd"]
    for clean in (
        "color: #1f77b4aa;",
        "uid 3f2b8c1e-7d4a-4b9e-8f0a-1c2d3e4f5a6b",
        "value 0x7fffffff",
        "team ed69ec",
        "sha256 " + "ab12" * 16,
        "1234567 jobs",
        "docs/img/a1b2c3d4e5.png",
    ):
        assert not [m for m in HASH.finditer(clean) if looks_like_a_hash(m.group(0))], clean
    assert ISSUE.search("as issue 23 asked") and ISSUE.search("fixed (#41)")
    assert ISSUE.search("Issues #7") and ISSUE.search("PR #3")
    assert not ISSUE.search("Waiting for job #12 to succeed") and not ISSUE.search(
        "issue_job_token"
    )
    assert (
        slug("A 10,000-task job array (real PostgreSQL)")
        == "a-10000-task-job-array-real-postgresql"
    )
    assert slug("GPU-hours (`usage/`)") == "gpu-hours-usage"
