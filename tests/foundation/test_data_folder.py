"""`manage.py` run by hand where no embedded service runs: one line that says what to set, no
traceback, and no data folder left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpuqueue.config import REPOSITORY as ROOT
from gpuqueue.ops.data_folder import embedded_database_missing, socket_path


def test_a_command_without_the_database_says_what_to_set_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["GPUQUEUE_DATA_DIR"] = str(data)
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "create_api_token", "alice"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"gpuqueue's database is not running in {data}: start the service with `make run` first, "
        "or set GPUQUEUE_DATA_DIR to the data folder `make run` uses (or DATABASE_URL to your "
        "PostgreSQL)."
    ]
    assert not data.exists() and list(tmp_path.iterdir()) == []


def test_commands_that_need_no_database_and_configured_servers_pass(tmp_path: Path) -> None:
    env = {"GPUQUEUE_DATA_DIR": str(tmp_path)}
    assert embedded_database_missing(["help"], env) is None
    assert embedded_database_missing(["migrate", "--help"], env) is None
    assert embedded_database_missing([], env) is None
    assert embedded_database_missing(["shell"], {**env, "DATABASE_URL": "postgresql://x/y"}) is None
    assert embedded_database_missing(["shell"], env) is not None
    url_file = tmp_path / "database-url"
    url_file.write_text("postgresql://x/y\n")
    assert (
        embedded_database_missing(["migrate"], {**env, "DATABASE_URL_FILE": str(url_file)}) is None
    )
    assert embedded_database_missing(["shell"], {**env, "DATABASE_URL": ""}) is not None  # unset


def test_a_running_embedded_database_is_found_by_its_socket(tmp_path: Path) -> None:
    socket_path(tmp_path).parent.mkdir(parents=True)
    socket_path(tmp_path).touch()
    assert embedded_database_missing(["shell"], {"GPUQUEUE_DATA_DIR": str(tmp_path)}) is None
