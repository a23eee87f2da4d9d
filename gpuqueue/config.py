"""Typed readers for settings that come from the environment.

Each refuses a malformed value with ImproperlyConfigured naming the variable, so a typo in a
deployment fails at start instead of at the first request. `X_FILE` may hold the path of a file
with the value of `X` (secrets mounted by Kubernetes).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


REPOSITORY = Path(__file__).resolve().parent.parent


def _raw(name: str, environ: Mapping[str, str] = os.environ) -> str | None:
    file_name = environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} cannot be read: {exc}") from exc
    value = environ.get(name)
    return value if value not in (None, "") else None


def env_str(
    name: str, default: str | None = None, environ: Mapping[str, str] = os.environ
) -> str | None:
    value = _raw(name, environ)
    return default if value is None else value


def data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the embedded PostgreSQL and Redis keep their data: GPUQUEUE_DATA_DIR, else the
    repository's ./data (the settings, `make run` and manage.py's check agree on it)."""
    return Path(env_str("GPUQUEUE_DATA_DIR", str(REPOSITORY / "data"), environ)).resolve()


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        parsed = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and parsed < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {parsed}")
    return parsed


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    value = _raw(name)
    if value is None:
        return default
    try:
        parsed = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None
    if minimum is not None and parsed < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {parsed}")
    return parsed


def env_bool(name: str, default: bool, environ: Mapping[str, str] = os.environ) -> bool:
    value = _raw(name, environ)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of true/false/1/0/yes/no/on/off, got {value!r}")


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = _raw(name)
    if value is None:
        return default
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]
