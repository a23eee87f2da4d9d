"""The embedded Redis keeps its data across a restart, as the README promises for `./data`: it
snapshots within a minute of a write (its save rule) and on a clean shutdown, and a restart from
the same folder loads that snapshot."""

from __future__ import annotations

from pathlib import Path

import redis as redis_py

from gpuqueue.ops.embedded import start_redis


def test_a_key_written_before_a_stop_is_read_back_after_a_restart(tmp_path: Path) -> None:
    server = start_redis(tmp_path / "redis")
    client = redis_py.Redis.from_url(server.url)
    try:
        # The save rule the code and docs state: a snapshot within 60 s of one write.
        assert client.config_get("save") == {"save": "60 1"}
        client.set("kept", "42")
    finally:
        client.close()
        server.stop()  # SIGTERM, as the launcher stops it
    assert (tmp_path / "redis" / "dump.rdb").is_file()

    server = start_redis(tmp_path / "redis")
    client = redis_py.Redis.from_url(server.url)
    try:
        assert client.get("kept") == b"42"
    finally:
        client.close()
        server.stop()
