"""GPUQUEUE_INSTANCE becomes a label value on every object: a value Kubernetes would refuse is
refused when the settings load, with the variable's name."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def load_settings(instance: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUQUEUE_INSTANCE": instance, "SECRET_KEY": "test"}
    code = "import gpuqueue.settings as s; print(s.GPUQUEUE_INSTANCE)"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("value", ["not a label!", "-leading", "x" * 64, "trailing."])
def test_an_instance_that_is_no_label_value_is_refused_with_its_name(value: str) -> None:
    loaded = load_settings(value)
    assert loaded.returncode != 0
    assert "GPUQUEUE_INSTANCE=" in loaded.stderr and "is not a label value" in loaded.stderr


def test_a_label_value_is_the_instance() -> None:
    loaded = load_settings("prod.gpu_queue-1")
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "prod.gpu_queue-1"
