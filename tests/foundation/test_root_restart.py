"""A restart as root never hands root's files to the service user.

Started by root, the launcher gives the data folder to the unprivileged `gpuqueue` user, whose
processes write there; a compromised one plants links in it. These tests plant them as that user
(a hard link to a root file as root: this kernel forbids the service user to make one, others
need not), run the launcher's preparation as root again, and find root's files as they were.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuqueue.ops.launcher import runs_as, service_user
from gpuqueue.ops.service_python import service_interpreter

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the launcher hands over only as root")


@pytest.fixture
def folder() -> Iterator[Path]:
    # Reachable by the service user, unlike pytest's private temporary folders.
    path = Path(tempfile.mkdtemp(prefix="gq-root-restart-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def root_only(path: Path, mode: int = 0o600) -> Path:
    path.write_text("root's\n")
    path.chmod(mode)
    return path


def as_service_user(run_as: dict[str, int], *argv: str) -> None:
    subprocess.run(argv, check=True, user=run_as["user"], group=run_as["group"])


def owner_and_mode(path: Path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_uid, stat.S_IMODE(info.st_mode)


def test_links_planted_by_the_service_user_leave_root_files_as_they_were(folder: Path) -> None:
    data = folder / "data"
    data.mkdir()
    run_as = service_user(data)  # the first start: the folder becomes the service user's
    assert os.stat(data).st_uid == run_as["user"]

    secret = root_only(folder / "root-only")
    elsewhere = folder / "root-folder"
    elsewhere.mkdir()
    key = root_only(elsewhere / "key")
    other = root_only(folder / "root-other", 0o640)
    # Planted by the service user: links to a file, in the folder and deeper, and to a folder.
    as_service_user(run_as, "ln", "-s", str(secret), str(data / "secret_key"))
    as_service_user(run_as, "mkdir", str(data / "staticfiles"))
    as_service_user(run_as, "ln", "-s", str(secret), str(data / "staticfiles" / "app.css"))
    as_service_user(run_as, "ln", "-s", str(elsewhere), str(data / "cache"))
    # A second name for a root file (planted as root: see the module's docstring).
    os.link(other, data / "staticfiles" / "hard")
    # Left by a run whose processes ran as root: this one is the service's to have.
    beat = root_only(data / "celerybeat-schedule")

    service_user(data)  # the restart

    assert owner_and_mode(secret) == (0, 0o600)
    assert owner_and_mode(key) == (0, 0o600)
    assert owner_and_mode(elsewhere) == (0, 0o755)
    assert owner_and_mode(other) == (0, 0o640)
    assert (data / "secret_key").is_symlink() and (data / "cache").is_symlink()
    assert owner_and_mode(beat) == (run_as["user"], 0o600)


def test_a_link_where_root_works_by_name_stops_the_restart_with_a_sentence(
    folder: Path,
) -> None:
    data = folder / "data"
    data.mkdir()
    run_as = service_user(data)
    elsewhere = folder / "root-folder"
    elsewhere.mkdir()
    key = root_only(elsewhere / "key")
    # Where the launcher builds its copy of the interpreter: it would copy into the link's
    # target and make every file there readable by all.
    as_service_user(run_as, "ln", "-s", str(elsewhere), str(data / "python-runtime.partial"))

    with pytest.raises(SystemExit) as refused:
        run_as = service_user(data)
        service_interpreter(data, functools.partial(runs_as, run_as))

    assert f"{data / 'python-runtime.partial'} is a symbolic link (to {elsewhere})" in str(
        refused.value
    )
    assert owner_and_mode(key) == (0, 0o600)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["key"]
