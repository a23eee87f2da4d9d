"""A pytest plugin (loaded with `-p tests.embedded_services`) that starts real PostgreSQL and
Redis servers from their wheels before Django reads its settings, and stops them at the end.

When DATABASE_URL and REDIS_URL are already set (CI with service containers), it starts
nothing and the tests use those servers.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from gpuqueue.ops.embedded import EmbeddedPostgres, EmbeddedRedis, start_postgres, start_redis

_servers: dict[str, EmbeddedPostgres | EmbeddedRedis] = {}
_tmp: Path | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: object, args: list[str]
) -> None:
    global _tmp
    # A short path: PostgreSQL's socket path must fit in 107 bytes.
    _tmp = Path(tempfile.mkdtemp(prefix="gq-test-"))
    _tmp.chmod(0o755)
    os.environ["GPUQUEUE_DATA_DIR"] = str(_tmp / "data")
    (_tmp / "data" / "staticfiles").mkdir(parents=True)  # whitenoise warns when it is missing
    os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production")
    os.environ.setdefault("GPUQUEUE_DEMO", "0")
    os.environ.setdefault("GPUQUEUE_SIM_STARTUP_SECONDS", "0")
    if "DATABASE_URL" not in os.environ:
        pg = start_postgres(_tmp / "pg")
        _servers["postgres"] = pg
        os.environ["DATABASE_URL"] = pg.url
    if "REDIS_URL" not in os.environ:
        redis = start_redis(_tmp / "redis")
        _servers["redis"] = redis
        os.environ["REDIS_URL"] = redis.url


def pytest_unconfigure(config: pytest.Config) -> None:
    for server in _servers.values():
        server.stop()
    _servers.clear()
    if _tmp is not None:
        shutil.rmtree(_tmp, ignore_errors=True)
