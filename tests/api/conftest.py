"""API fixtures: the personas with tokens, a known node inventory, a throttle out of the way."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

PERSONAS = ("alice", "bob", "carol", "root")


@pytest.fixture(autouse=True)
def _api_rate(settings: Any) -> None:
    # Tests make many calls with one token; throttling has its own test.
    settings.GPUQUEUE_API_RATE = "100000/min"
    settings.GPUQUEUE_API_ANON_RATE = "100000/min"
    settings.GPUQUEUE_API_BAD_TOKEN_RATE = "100000/min"
    # The personas' passwords are hashed when the world is built; PBKDF2's million rounds cost
    # about a second per user on these machines, and these tests never sign in with them.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def steady_rate_window() -> None:
    """Rate windows are fixed (gpuqueue/api/throttling.py): a test that counts a few requests
    against a rate starts at least 5 s before the minute turns, or its count could be split
    between two windows and the limit never reached. (An hour or a day turns with a minute.)"""
    left = 60 - time.time() % 60
    if left < 5:
        time.sleep(left + 0.1)


@pytest.fixture
def nodes(world: Any) -> list[Any]:
    """The inventory the cluster watcher would have written: 4 × 8 H100, 2 × 4 L4."""
    from gpuqueue.models import Node

    made = []
    for i in range(4):
        made.append(
            Node.objects.create(
                name=f"h100-{i}",
                capacity={"nvidia.com/gpu": 8},
                labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            )
        )
    for i in range(2):
        made.append(
            Node.objects.create(
                name=f"l4-{i}",
                capacity={"nvidia.com/gpu": 4},
                labels={"nvidia.com/gpu.product": "NVIDIA-L4"},
            )
        )
    return made


@pytest.fixture
def tokens(world: Any) -> dict[str, str]:
    from teams.services import create_token

    return {
        name: create_token(getattr(world, name), name="tests", actor=None)[1] for name in PERSONAS
    }


@pytest.fixture
def api(world: Any, nodes: Any, tokens: dict[str, str]) -> Callable[[str | None], APIClient]:
    """api("alice") -> a client that sends alice's token; api(None) -> anonymous."""

    def make(persona: str | None) -> APIClient:
        client = APIClient()
        if persona is not None:
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens[persona]}")
        return client

    return make


JOB = {"team": "team-a", "flavor": "h100", "name": "train", "image": "ghcr.io/acme/train:1"}


@pytest.fixture
def job_body() -> dict[str, Any]:
    return dict(JOB)


@pytest.fixture
def cli(
    live_server: Any, tokens: dict[str, str], nodes: Any, monkeypatch: Any, tmp_path: Any
) -> Callable[..., int]:
    """cli(*argv, persona="alice"): the `gpuqueue` command against a live server, with a config
    folder of its own and no URL or token from the environment."""
    from gpuqueue.client.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("GPUQUEUE_URL", raising=False)
    monkeypatch.delenv("GPUQUEUE_TOKEN", raising=False)

    def run(*argv: str, persona: str = "alice") -> int:
        return main(["--url", live_server.url, "--token", tokens[persona], *argv])

    return run
