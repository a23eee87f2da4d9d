"""Throttles and the sign-in lockout count by what an attacker cannot choose: the client address
as the trusted proxies report it (no header by default) and a failing token's prefix; a valid
credential is never refused because someone else failed."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from gpuqueue.core import caches
from gpuqueue.core.client_address import client_address
from gpuqueue.ops.web_front import wsgi_environ


def _address() -> str:
    return f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250)}"


def _guess() -> str:
    return f"gq_{secrets.token_hex(4)}_{secrets.token_urlsafe(24)}"


def _get(token: str, address: str, forwarded: str | None = None) -> int:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    extra = {} if forwarded is None else {"HTTP_X_FORWARDED_FOR": forwarded}
    return int(client.get("/api/v1/me/", **extra).status_code)


@pytest.mark.parametrize(
    ("hops", "forwarded", "want"),
    [
        (0, "198.51.100.7", "10.0.0.5"),
        (1, "198.51.100.7", "198.51.100.7"),
        (1, "6.6.6.6, 198.51.100.7", "198.51.100.7"),
        (2, "6.6.6.6, 198.51.100.7, 10.1.1.1", "198.51.100.7"),
        (2, "198.51.100.7", "10.0.0.5"),  # fewer entries than proxies: none is vouched for
        (1, "not-an-address", "10.0.0.5"),
        (1, None, "10.0.0.5"),
    ],
)
def test_the_client_address_is_what_the_trusted_proxies_report(
    settings: Any, hops: int, forwarded: str | None, want: str
) -> None:
    settings.GPUQUEUE_TRUSTED_PROXY_HOPS = hops
    extra = {} if forwarded is None else {"HTTP_X_FORWARDED_FOR": forwarded}
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.5", **extra)
    assert client_address(request) == want


@pytest.mark.usefixtures("steady_rate_window")
def test_rotating_x_forwarded_for_does_not_escape_the_bad_token_throttle(
    settings: Any, tokens: Any
) -> None:
    settings.GPUQUEUE_API_BAD_TOKEN_RATE = "3/min"
    address = _address()
    statuses = [_get(_guess(), address, forwarded=_address()) for _ in range(4)]
    assert statuses == [401, 401, 401, 429]


@pytest.mark.usefixtures("steady_rate_window")
def test_behind_one_proxy_the_throttle_counts_the_address_the_proxy_saw(
    settings: Any, tokens: Any
) -> None:
    settings.GPUQUEUE_API_BAD_TOKEN_RATE = "3/min"
    settings.GPUQUEUE_TRUSTED_PROXY_HOPS = 1
    proxy, client = _address(), _address()
    # The client writes whatever it likes on the left; the proxy appends what it saw.
    statuses = [_get(_guess(), proxy, forwarded=f"{_address()}, {client}") for _ in range(4)]
    assert statuses == [401, 401, 401, 429]
    # Another client behind the same proxy is another address.
    assert _get(_guess(), proxy, forwarded=_address()) == 401


@pytest.mark.usefixtures("steady_rate_window")
def test_a_valid_token_from_an_address_past_the_bad_token_rate_still_works(
    settings: Any, tokens: Any
) -> None:
    settings.GPUQUEUE_API_BAD_TOKEN_RATE = "3/min"
    address = _address()
    assert [_get(_guess(), address) for _ in range(5)] == [401, 401, 401, 429, 429]
    caches.forget_everything()  # as a process that has not kept the token yet
    assert _get(tokens["alice"], address) == 200
    # The valid token's success does not lift the throttle for the guesses.
    assert _get(_guess(), address) == 429


# --- Sign-in ------------------------------------------------------------------------------------


def _sign_in(address: str, username: str, password: str, forwarded: str | None = None) -> int:
    extra = {} if forwarded is None else {"HTTP_X_FORWARDED_FOR": forwarded}
    client = Client(REMOTE_ADDR=address)
    response = client.post(
        "/accounts/login/", {"username": username, "password": password}, **extra
    )
    return int(response.status_code)


@pytest.fixture
def lockout(settings: Any, world: Any) -> int:
    settings.AXES_FAILURE_LIMIT = 3
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return 3


@pytest.mark.parametrize(("username", "password"), [("root", "root-pass-1"), ("bob", "bob-pass-1")])
def test_wrong_passwords_from_one_address_do_not_lock_the_user_out_elsewhere(
    lockout: int, username: str, password: str
) -> None:
    attacker, user = _address(), _address()
    assert [_sign_in(attacker, username, "wrong") for _ in range(lockout)] == [200, 200, 429]
    assert _sign_in(attacker, username, password) == 429  # that address is slowed
    assert _sign_in(user, username, password) == 302  # the user, elsewhere, is not


def test_rotating_x_forwarded_for_does_not_escape_the_sign_in_lockout(lockout: int) -> None:
    attacker = _address()
    statuses = [_sign_in(attacker, "root", "wrong", forwarded=_address()) for _ in range(lockout)]
    assert statuses == [200, 200, 429]
    assert _sign_in(attacker, "root", "root-pass-1", forwarded=_address()) == 429


def test_tries_during_the_lockout_do_not_renew_it(lockout: int, settings: Any) -> None:
    from axes.models import AccessAttempt

    attacker = _address()
    for _ in range(lockout):
        _sign_in(attacker, "root", "wrong")
    locked_at = AccessAttempt.objects.get(ip_address=attacker).attempt_time
    assert [_sign_in(attacker, "root", "wrong") for _ in range(5)] == [429] * 5
    attempt = AccessAttempt.objects.get(ip_address=attacker)
    assert attempt.attempt_time == locked_at
    assert attempt.failures_since_start == lockout
    # The cool-off, counted from the lockout, has passed: the address may try again.
    AccessAttempt.objects.filter(pk=attempt.pk).update(
        attempt_time=locked_at - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    )
    assert _sign_in(attacker, "root", "root-pass-1") == 302


def test_a_header_spelled_with_underscores_does_not_pass_for_x_forwarded_for() -> None:
    # The web front builds the environ: a proxy that strips X-Forwarded-For by its dashed name
    # would let X_Forwarded_For through, and both would be HTTP_X_FORWARDED_FOR.
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/v1/me/",
        "raw_path": b"/api/v1/me/",
        "query_string": b"",
        "http_version": "1.1",
        "client": ("10.0.0.5", 40000),
        "headers": [
            (b"x_forwarded_for", b"6.6.6.6"),
            (b"x-forwarded-for", b"198.51.100.7"),
            (b"x-forwarded-for", b"10.1.1.1"),
        ],
    }
    environ = wsgi_environ(scope, b"")
    assert environ["HTTP_X_FORWARDED_FOR"] == "198.51.100.7,10.1.1.1"
    assert environ["REMOTE_ADDR"] == "10.0.0.5"
