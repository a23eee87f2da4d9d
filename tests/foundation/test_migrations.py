"""The migrations match the models, whatever the hash seed (sets in conditions are sorted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seed", ["1", "2"])
def test_models_and_migrations_agree(seed: str) -> None:
    proc = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONHASHSEED=seed),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
