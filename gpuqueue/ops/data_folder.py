"""Whether a management command run by hand can reach the embedded service's database.

`make run` keeps PostgreSQL in its data folder (GPUQUEUE_DATA_DIR, default ./data) and hands its
URL to the processes it starts. `manage.py` run by a person finds it by the same default; run
from another folder's settings, or before `make run`, it would fail deep inside psycopg with a
long traceback (and leave a data folder behind). This says so in one line instead, before
Django's settings create anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuqueue.config import data_dir as configured_data_dir
from gpuqueue.config import env_str

# Commands that work without the database.
OFFLINE_COMMANDS = frozenset(
    {"help", "version", "check", "collectstatic", "makemigrations", "diffsettings"}
)


def socket_path(data_dir: Path) -> Path:
    """Where the embedded PostgreSQL listens (the settings' default URL: this folder, port 5432)."""
    return data_dir / "postgres" / ".s.PGSQL.5432"


def embedded_database_missing(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """One line saying what to do, when `argv` (manage.py's arguments) needs the embedded
    database and it is not running; None otherwise (a DATABASE_URL, an offline command)."""
    if env_str("DATABASE_URL", environ=environ) or not argv or argv[0].startswith("-"):
        return None
    if argv[0] in OFFLINE_COMMANDS or "--help" in argv or "-h" in argv:
        return None
    data_dir = configured_data_dir(environ)
    if socket_path(data_dir).exists():
        return None
    return (
        f"gpuqueue's database is not running in {data_dir}: start the service with `make run` "
        "first, or set GPUQUEUE_DATA_DIR to the data folder `make run` uses "
        "(or DATABASE_URL to your PostgreSQL)."
    )
