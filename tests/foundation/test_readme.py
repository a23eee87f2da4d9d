"""The README is the contract for a newcomer: its two commands and every setting."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_start_shows_exactly_the_two_commands_and_ci_runs_the_second() -> None:
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick.strip().splitlines()]
    assert commands == ["make run", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_environment_variable_the_settings_read_is_documented() -> None:
    settings = (ROOT / "gpuqueue" / "settings.py").read_text()
    names = set(re.findall(r'env_[a-z]+\(\s*"([A-Z0-9_]+)"', settings))
    documented = (ROOT / "README.md").read_text() + "".join(
        p.read_text() for p in (ROOT / "docs").glob("*.md")
    )
    assert names, "the settings read no variables?"
    missing = sorted(name for name in names if f"`{name}`" not in documented)
    assert missing == []
