"""The interpreter the service's Python processes run under when the launcher is root.

As root, `make run` starts its processes as the unprivileged `gpuqueue` user, who must be able to
run the interpreter. A Python installed under root's private home (pyenv's default,
/root/.pyenv, mode 700) cannot be: its binary, shared library and standard library are out of
reach, while the project's virtual environment (its packages) is readable wherever the
repository is. So the launcher copies the runtime itself (binary, libpython, standard library:
about 125 MB, once per data folder) to a root-owned, world-readable folder and runs the service
with it and the project's site-packages. The very same build runs, so every package's environment
markers and compiled extensions still hold (a system Python of another patch release does not:
redis-py needs a package below 3.11.3 that a 3.11.7 environment never installed).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

# What the service's processes need first: their packages, and the data folder (argv[1]).
PROBE = (
    "import os, sys, django, celery, granian, gpuqueue; "
    "sys.exit(not os.access(sys.argv[1], os.R_OK | os.W_OK | os.X_OK))"
)
RUNTIME = "python-runtime"  # under the data folder; root's, never handed to the service user
_SKIPPED = shutil.ignore_patterns(
    "site-packages", "test", "idlelib", "tkinter", "ensurepip", "config-*"
)


def service_interpreter(
    data_dir: Path, runs: Callable[[list[str], dict[str, str]], bool]
) -> tuple[str, dict[str, str]] | None:
    """An interpreter the service user can run with the project's packages, and the environment
    it needs: this one when it can (`runs(argv, env)` says whether argv succeeds as that user),
    else a copy of its runtime under `data_dir`; None when neither works (or when that user
    cannot reach the data folder)."""
    if runs([sys.executable, "-c", PROBE, str(data_dir)], {}):
        return sys.executable, {}
    copied = copy_runtime(data_dir / RUNTIME)
    if copied is None:
        return None
    python, env = copied
    return (python, env) if runs([python, "-c", PROBE, str(data_dir)], env) else None


def copy_runtime(target: Path) -> tuple[str, dict[str, str]] | None:
    """This interpreter's build copied to `target` (kept while it is the same build), with a
    `.pth` line that adds the project's site-packages (`site.addsitedir` also runs their `.pth`
    files, the editable install's among them)."""
    prefix = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    binary = prefix / "bin" / version
    stamp = f"{sys.version}\n{prefix}\n"
    if not binary.is_file():
        return None
    if _read(target / "BUILD") != stamp:
        shutil.rmtree(target, ignore_errors=True)  # by descriptors: follows no link
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        # The data folder is the service user's, who may swap any name in it for a link: build
        # in a new folder only root can enter, reached through its descriptor, never by name.
        os.mkdir(partial, 0o700)  # fails on anything left at that name, a link included
        fd = os.open(partial, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_uid != os.geteuid():
                return None
            built = Path(f"/proc/self/fd/{fd}")
            (built / "bin").mkdir()
            shutil.copy2(binary, built / "bin" / version)
            shutil.copytree(prefix / "lib" / version, built / "lib" / version, ignore=_SKIPPED)
            for library in prefix.joinpath("lib").glob("libpython*.so*"):
                shutil.copy2(library, built / "lib" / library.name, follow_symlinks=False)
            site_packages = built / "lib" / version / "site-packages"
            site_packages.mkdir()
            ours = sysconfig.get_path("purelib")
            (site_packages / "gpuqueue-project.pth").write_text(
                f"import site; site.addsitedir({ours!r})\n"
            )
            (built / "BUILD").write_text(stamp)
            for path in built.rglob("*"):  # readable by all, writable by root only
                if not path.is_symlink():
                    path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
            os.fchmod(fd, 0o755)
        finally:
            os.close(fd)
        partial.rename(target)
    # The binary looks for libpython at its build's absolute path first (RUNPATH), which the
    # service user cannot reach; LD_LIBRARY_PATH comes before it.
    return str(target / "bin" / version), {"LD_LIBRARY_PATH": str(target / "lib")}


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
