"""docker-compose.yml names the production-like stack; settings refuse malformed values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

from gpuqueue import config

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_defines_web_worker_beat_and_real_postgres_and_redis() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"web", "worker", "beat", "watcher", "postgres", "redis"} <= set(services)
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    for name in ("web", "worker", "beat", "watcher"):
        env = services[name]["environment"]
        assert (
            env["DATABASE_URL"].startswith("postgresql://") and "@postgres:" in env["DATABASE_URL"]
        )
        assert env["REDIS_URL"].startswith("redis://redis:")
    assert "celery" in services["worker"]["command"] and "worker" in services["worker"]["command"]
    assert "beat" in services["beat"]["command"]


@pytest.mark.parametrize(
    ("reader", "value", "message"),
    [
        (lambda: config.env_int("GQ_T", 1), "ten", "GQ_T must be an integer"),
        (lambda: config.env_int("GQ_T", 1, minimum=1), "0", "GQ_T must be at least 1"),
        (lambda: config.env_float("GQ_T", 1.0), "fast", "GQ_T must be a number"),
        (lambda: config.env_bool("GQ_T", True), "maybe", "GQ_T must be one of true/false"),
        (lambda: config.env_choice("GQ_T", "a", ("a", "b")), "c", "GQ_T must be one of a, b"),
    ],
)
def test_a_malformed_setting_is_refused_with_its_name(
    monkeypatch: pytest.MonkeyPatch, reader: object, value: str, message: str
) -> None:
    monkeypatch.setenv("GQ_T", value)
    with pytest.raises(ImproperlyConfigured, match=message):
        reader()  # type: ignore[operator]


def test_well_formed_settings_and_secret_files_are_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GQ_INT", "7")
    monkeypatch.setenv("GQ_BOOL", "off")
    monkeypatch.setenv("GQ_LIST", "a, b,,c")
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("GQ_SECRET_FILE", str(secret))
    assert config.env_int("GQ_INT", 1) == 7
    assert config.env_bool("GQ_BOOL", True) is False
    assert config.env_list("GQ_LIST", []) == ["a", "b", "c"]
    assert config.env_str("GQ_SECRET") == "s3cret"
    assert config.env_int("GQ_UNSET", 5) == 5


def test_an_unreadable_secret_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GQ_SECRET_FILE", "/nonexistent/secret")
    with pytest.raises(ImproperlyConfigured, match="GQ_SECRET_FILE"):
        config.env_str("GQ_SECRET")


def test_settings_module_refuses_a_bad_value_at_start(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = dict(
        os.environ, GPUQUEUE_CYCLE_SECONDS="often", DJANGO_SETTINGS_MODULE="gpuqueue.settings"
    )
    proc = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "GPUQUEUE_CYCLE_SECONDS must be a number" in proc.stderr
