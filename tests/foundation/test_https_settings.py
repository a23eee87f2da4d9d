"""GPUQUEUE_HTTPS: behind a TLS-terminating proxy, cookies are secure and HSTS is sent; the
deployment sets it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
READ = (
    "import json, django; django.setup(); from django.conf import settings as s; "
    "print(json.dumps([s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, "
    "s.SECURE_PROXY_SSL_HEADER]))"
)


def https_settings(value: str | None) -> list[object]:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="gpuqueue.settings")
    env.pop("GPUQUEUE_HTTPS", None)
    if value is not None:
        env["GPUQUEUE_HTTPS"] = value
    out = subprocess.run(
        [sys.executable, "-c", READ], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def test_https_turns_on_secure_cookies_hsts_and_the_proxy_header() -> None:
    assert https_settings(None) == [False, False, 0, None]
    secure, csrf, hsts, header = https_settings("true")
    assert secure and csrf and hsts >= 180 * 24 * 3600
    assert header == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_the_deployment_runs_behind_tls() -> None:
    config = yaml.safe_load((ROOT / "deploy" / "base" / "config.yaml").read_text())
    assert config["data"]["GPUQUEUE_HTTPS"] == "true"
