"""The engine is pure: importing it must not pull in Django (or anything else of the service)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "modules", ["gpuqueue.scheduler, gpuqueue.scheduler.bench", "gpuqueue.core.taints"]
)
def test_the_engine_imports_without_django_in_a_fresh_interpreter(modules: str) -> None:
    """The engine, and the taint matching the snapshot and the cluster map share."""
    code = (
        f"import sys, {modules}; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'django', 'celery', 'redis', 'kubernetes', 'rest_framework', 'psycopg', 'teams'} "
        "or m in {'gpuqueue.models', 'gpuqueue.cycle'}); "
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


def test_paused_gc_restores_the_collector_as_it_found_it() -> None:
    import gc

    from gpuqueue.scheduler.runtime import paused_gc

    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
