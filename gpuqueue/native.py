"""An optional build of the engine and the trace replay with mypyc, and its guard.

`make native` compiles the modules below with mypyc (the compiler of the pinned mypy, made for
type-annotated Python like this) into C extensions next to their sources; Python then imports
the extension instead of the source, and a Philly replay runs about a quarter faster
(docs/benchmarks.md). Nothing needs it: the sources stay the product, tested as they are, and
`make clean-native` removes the build.

An extension outlives edits to its source, and Python would keep importing the old code. The
build therefore records a hash of each source (`STAMP`), and `check()`, run when
`gpuqueue.scheduler` or `gpuqueue.sim` (the packages with compiled modules) is imported,
refuses extensions whose sources changed since, naming the command that mends it; this module
imports neither, so that `python -m gpuqueue.native build` can replace a stale build.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository (the directory of gpuqueue/)
# What a replay spends its time in (engine, order, ledger, victims, reservations, placement,
# fair shares; the replay's loop, its engine policy and queues, its metrics), paths from ROOT.
MODULES = (
    "gpuqueue/scheduler/engine.py",
    "gpuqueue/scheduler/fairshare.py",
    "gpuqueue/scheduler/ledger.py",
    "gpuqueue/scheduler/ordering.py",
    "gpuqueue/scheduler/placement.py",
    "gpuqueue/scheduler/preemption.py",
    "gpuqueue/scheduler/reasons.py",
    "gpuqueue/scheduler/starvation.py",
    "gpuqueue/scheduler/usage.py",
    "gpuqueue/sim/ledger.py",
    "gpuqueue/sim/metrics.py",
    "gpuqueue/sim/policies/gpuqueue.py",
    "gpuqueue/sim/queue.py",
    "gpuqueue/sim/run.py",
    "gpuqueue/sim/simulator.py",
)
GROUP = "gpuqueue.native"  # mypyc's shared library: gpuqueue/native__mypyc*.so
STAMP = "gpuqueue/native.json"  # source path -> sha256 of the source compiled
BUILD_DIR = "build/mypyc"  # generated C and objects


class StaleNativeBuild(ImportError):
    """A compiled module whose source changed after the build."""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compiled(root: Path, source: str) -> list[Path]:
    stem = root / source[: -len(".py")]
    return [p for suffix in EXTENSION_SUFFIXES if (p := Path(f"{stem}{suffix}")).exists()]


def extensions(root: Path = ROOT) -> list[Path]:
    """The compiled modules of the build present under `root`, the shared library included."""
    shared = GROUP.replace(".", "/") + "__mypyc.py"
    return [p for source in (*MODULES, shared) for p in _compiled(root, source)]


def active(root: Path = ROOT) -> bool:
    """Whether compiled modules are there (current ones, once `check` has passed)."""
    return bool(extensions(root))


def check(root: Path = ROOT) -> None:
    """Raise StaleNativeBuild when a compiled module would run code other than its source."""
    compiled = [source for source in MODULES if _compiled(root, source)]
    if not compiled:
        return
    try:
        built = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        built = {}
    for source in compiled:
        path = root / source
        if built.get(source) != (_digest(path) if path.exists() else None):
            raise StaleNativeBuild(
                f"{source} changed since it was compiled: run `make native` again, or "
                "`make clean-native` to run from the sources"
            )


def build(root: Path = ROOT, modules: tuple[str, ...] = MODULES) -> None:
    """Compile `modules` (paths from `root`) in place with mypyc, then record the hashes of
    the sources compiled."""
    from mypyc.build import mypycify  # only here: mypy is a development dependency
    from setuptools import setup  # type: ignore[import-untyped]  # no stubs installed

    clean(root)
    previous = Path.cwd()
    os.chdir(root)  # mypyc finds the modules from their paths, relative to the repository
    try:
        setup(
            name="gpuqueue-native",
            ext_modules=mypycify(list(modules), group_name=GROUP, target_dir=BUILD_DIR),
            script_args=["build_ext", "--inplace", "--quiet", "--build-temp", BUILD_DIR]
            + ["--build-lib", f"{BUILD_DIR}/lib"],
        )
    finally:
        os.chdir(previous)
    digests = {source: _digest(root / source) for source in modules}
    (root / STAMP).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


def clean(root: Path = ROOT) -> None:
    """Remove the compiled modules, the stamp and the generated C."""
    for path in extensions(root):
        path.unlink()
    (root / STAMP).unlink(missing_ok=True)
    shutil.rmtree(root / BUILD_DIR, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["build"]:
        build()
        print(f"compiled {len(MODULES)} modules with mypyc; `make clean-native` removes them")
        return 0
    if args == ["clean"]:
        clean()
        return 0
    print("usage: python -m gpuqueue.native build|clean", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
