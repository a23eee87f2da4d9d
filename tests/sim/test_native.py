"""The optional mypyc build (gpuqueue/native.py): compiled modules are the sources' code, and a
build whose sources changed since is refused before anything imports it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from gpuqueue import native

SOURCE = "gpuqueue/scheduler/fairshare.py"


def _layout(root: Path, text: str = "x = 1\n") -> Path:
    """One module of the build as a source and a (fake) extension next to it."""
    source = root / SOURCE
    source.parent.mkdir(parents=True)
    source.write_text(text)
    (root / SOURCE.replace(".py", EXTENSION_SUFFIXES[0])).write_bytes(b"")
    return source


def _stamp(root: Path, text: str) -> None:
    digest = hashlib.sha256(text.encode()).hexdigest()
    (root / native.STAMP).write_text(json.dumps({SOURCE: digest}))


def test_sources_alone_pass(tmp_path: Path) -> None:
    (tmp_path / "gpuqueue/scheduler").mkdir(parents=True)
    (tmp_path / SOURCE).write_text("x = 1\n")
    native.check(tmp_path)
    assert not native.active(tmp_path)


def test_a_build_of_the_same_sources_passes(tmp_path: Path) -> None:
    _layout(tmp_path)
    _stamp(tmp_path, "x = 1\n")
    native.check(tmp_path)
    assert native.active(tmp_path)


def test_a_source_changed_since_the_build_is_refused(tmp_path: Path) -> None:
    source = _layout(tmp_path)
    _stamp(tmp_path, "x = 1\n")
    source.write_text("x = 2\n")
    with pytest.raises(native.StaleNativeBuild, match="fairshare.py changed since it was compiled"):
        native.check(tmp_path)


def test_an_extension_without_its_record_is_refused(tmp_path: Path) -> None:
    _layout(tmp_path)  # no stamp: built by hand, or the stamp was lost
    with pytest.raises(native.StaleNativeBuild, match="make native"):
        native.check(tmp_path)


def test_clean_removes_the_build(tmp_path: Path) -> None:
    source = _layout(tmp_path)
    _stamp(tmp_path, "x = 1\n")
    native.clean(tmp_path)
    assert not native.active(tmp_path)
    assert not (tmp_path / native.STAMP).exists()
    assert source.exists()


def test_a_stale_build_can_be_rebuilt_or_removed_from_the_command_line(tmp_path: Path) -> None:
    """`make native` runs `python -m gpuqueue.native`: importing it must not run the guard that
    refuses the stale build it is there to replace."""
    package = Path(native.__file__).resolve().parent
    source = _layout(tmp_path)
    _stamp(tmp_path, "x = 1\n")
    source.write_text("x = 2\n")
    for name in ("__init__.py", "native.py"):
        shutil.copy(package / name, tmp_path / "gpuqueue" / name)
    done = subprocess.run(
        [sys.executable, "-m", "gpuqueue.native", "clean"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert not native.active(tmp_path)


def _compiler() -> str | None:
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which("cc") if headers.exists() else None


@pytest.mark.skipif(_compiler() is None, reason="no C compiler or no Python headers")
def test_a_real_build_runs_the_compiled_module_and_refuses_it_once_stale(tmp_path: Path) -> None:
    """Compile one module of a copy of the package, check that Python imports the extension
    and that it computes what the source computes, then edit the source: gpuqueue refuses to
    import. (About half a minute: mypyc type-checks, then the C compiler runs.)"""
    root = Path(native.__file__).resolve().parent.parent
    shutil.copytree(
        root / "gpuqueue",
        tmp_path / "gpuqueue",
        ignore=shutil.ignore_patterns("__pycache__", "*.so"),
    )
    (tmp_path / native.STAMP).unlink(missing_ok=True)
    native.build(tmp_path, (SOURCE,))
    assert native.active(tmp_path)
    probe = (
        "import gpuqueue.scheduler.fairshare as f\n"
        "print(f.__file__)\n"
        "print(f.water_fill_tuples(10, [('a', 2, 9, 1.0), ('b', 0, 9, 3.0), ('c', 0, 1, 1.0)]))\n"
    )

    def run() -> subprocess.CompletedProcess[str]:
        # -c puts the working directory first on the path: the copy is imported, not the
        # installed (editable) gpuqueue, whose finder comes after the path.
        return subprocess.run(
            [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True
        )

    done = run()
    assert done.returncode == 0, done.stderr
    where, shares = done.stdout.splitlines()
    assert where.startswith(str(tmp_path)) and where.endswith(EXTENSION_SUFFIXES[0])
    from gpuqueue.scheduler.fairshare import water_fill_tuples

    expected = water_fill_tuples(10, [("a", 2, 9, 1.0), ("b", 0, 9, 3.0), ("c", 0, 1, 1.0)])
    assert shares == str(expected)

    source = tmp_path / SOURCE
    source.write_text(source.read_text() + "\n# edited after the build\n")
    done = run()
    assert done.returncode != 0
    assert "StaleNativeBuild" in done.stderr and SOURCE in done.stderr
