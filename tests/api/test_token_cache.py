"""Tokens kept by a web process (teams.token_cache): no query while nothing changed, and every
change to a token or its user takes effect on the next request; with the caches off, the same
answers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gpuqueue.core import caches
from gpuqueue.core import redis as api_redis
from teams.models import ApiToken


def _prefix(secret: str) -> str:
    return secret.removeprefix("gq_").partition("_")[0]


def _token_queries(queries: CaptureQueriesContext) -> list[str]:
    table = ApiToken._meta.db_table
    return [q["sql"] for q in queries.captured_queries if table in q["sql"]]


def _revoke_behind_the_cache(secret: str) -> None:
    """What a change made by another process looks like to this one: the row changes (no
    signal here) and, with the epoch, only the value in Redis."""
    ApiToken.objects.filter(prefix=_prefix(secret)).update(revoked_at=timezone.now())


def test_a_kept_token_is_not_read_again(api: Any) -> None:
    client = api("alice")
    assert client.get("/api/v1/me/").status_code == 200
    with CaptureQueriesContext(connection) as queries:
        assert [client.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 200]
    assert _token_queries(queries) == []


def test_a_change_in_another_process_takes_effect_at_the_next_request(
    api: Any, tokens: Any
) -> None:
    client = api("alice")
    assert client.get("/api/v1/me/").status_code == 200
    _revoke_behind_the_cache(tokens["alice"])
    assert client.get("/api/v1/me/").status_code == 200  # kept: nothing said it changed
    api_redis.client().set(caches.EPOCH_KEY, "renewed-by-another-process")
    refused = client.get("/api/v1/me/")
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "not_authenticated"


def test_revoking_through_gpuqueue_refuses_the_next_request(
    api: Any, tokens: Any, world: Any
) -> None:
    from teams.services import revoke_token

    client = api("alice")
    assert client.get("/api/v1/me/").status_code == 200
    revoke_token(world.alice, ApiToken.objects.get(prefix=_prefix(tokens["alice"])))
    assert client.get("/api/v1/me/").status_code == 401
    assert api("bob").get("/api/v1/me/").status_code == 200  # other tokens are read again


def test_a_deactivated_user_is_refused_at_the_next_request(api: Any, world: Any) -> None:
    client = api("alice")
    assert client.get("/api/v1/me/").status_code == 200
    world.alice.is_active = False
    world.alice.save()
    assert client.get("/api/v1/me/").status_code == 401


def test_a_demoted_site_admin_loses_admin_rights_at_the_next_request(api: Any, world: Any) -> None:
    client = api("root")
    assert client.get("/api/v1/audit/").status_code == 200
    world.root.is_superuser = False
    world.root.save()
    assert client.get("/api/v1/audit/").status_code == 403


def test_a_kept_token_expires_on_time(api: Any, tokens: Any, monkeypatch: Any) -> None:
    ApiToken.objects.filter(prefix=_prefix(tokens["alice"])).update(
        expires_at=timezone.now() + timedelta(hours=1)
    )
    client = api("alice")
    assert client.get("/api/v1/me/").status_code == 200
    later = timezone.now() + timedelta(hours=2)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert client.get("/api/v1/me/").status_code == 401


def test_an_emptied_redis_cannot_make_a_stale_token_current(api: Any, tokens: Any) -> None:
    """A counter would start again from a value seen before; the epoch is a fresh random one."""
    client = api("alice")
    assert client.get("/api/v1/me/").status_code == 200
    _revoke_behind_the_cache(tokens["alice"])
    api_redis.client().delete(caches.EPOCH_KEY)
    assert client.get("/api/v1/me/").status_code == 401


def test_without_redis_every_request_reads_its_token(
    api: Any, tokens: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = api("alice")
    assert client.get("/api/v1/me/").status_code == 200

    def unreachable() -> Any:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(api_redis, "client", unreachable)
    assert client.get("/api/v1/me/").status_code == 200
    _revoke_behind_the_cache(tokens["alice"])
    assert client.get("/api/v1/me/").status_code == 401


def test_kept_rows_are_read_again_after_their_maximum_age(
    api: Any, tokens: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = api("alice")
    assert client.get("/api/v1/me/").status_code == 200
    _revoke_behind_the_cache(tokens["alice"])
    monkeypatch.setattr(caches, "MAX_AGE_SECONDS", -1.0)
    assert client.get("/api/v1/me/").status_code == 401


@pytest.mark.usefixtures("steady_rate_window")
def test_an_impostor_with_a_real_prefix_spends_none_of_the_tokens_rate(
    api: Any, settings: Any, tokens: Any
) -> None:
    from rest_framework.test import APIClient

    settings.GPUQUEUE_API_RATE = "3/day"
    client = api("carol")
    assert client.get("/api/v1/me/").status_code == 200  # now kept
    impostor = APIClient()
    impostor.credentials(HTTP_AUTHORIZATION=f"Bearer gq_{_prefix(tokens['carol'])}_guess")
    assert [impostor.get("/api/v1/me/").status_code for _ in range(5)] == [401] * 5
    assert [client.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 429]


def test_a_kept_token_still_records_its_use_once_a_minute(
    api: Any, tokens: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = ApiToken.objects.get(prefix=_prefix(tokens["alice"]))
    client = api("alice")
    assert client.get("/api/v1/me/").status_code == 200
    first = ApiToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/api/v1/me/").status_code == 200
    assert _token_queries(queries) == []  # within the minute: no write
    later = timezone.now() + timedelta(minutes=2)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert client.get("/api/v1/me/").status_code == 200
    assert ApiToken.objects.get(pk=token.pk).last_used_at == later


def test_with_the_caches_off_every_request_reads_its_token(
    api: Any, tokens: Any, settings: Any
) -> None:
    settings.GPUQUEUE_CACHES = False
    client = api("alice")
    with CaptureQueriesContext(connection) as queries:
        assert [client.get("/api/v1/me/").status_code for _ in range(2)] == [200, 200]
    assert len(_token_queries(queries)) >= 2
    _revoke_behind_the_cache(tokens["alice"])
    assert client.get("/api/v1/me/").status_code == 401


def test_kept_tokens_were_checked_against_the_pinned_django() -> None:
    """Each request gets copies of the kept token and user (`copy.copy` of model instances,
    which Django implements through its pickling hooks); a new Django may change them. This
    fails when the installed Django is not the version pinned in pyproject.toml: run these
    tests against the new version, then move the pin."""
    import tomllib
    from pathlib import Path

    import django

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    pins = [d for d in pyproject["project"]["dependencies"] if d.lower().startswith("django==")]
    assert pins == [f"Django=={django.__version__}"]


def test_signing_in_leaves_kept_tokens_current(world: Any) -> None:
    """A sign-in stamps last_login, which no kept value reads: the epoch stays; any other
    change to the user renews it."""
    from django.contrib.auth.models import update_last_login

    api_redis.client().set(caches.EPOCH_KEY, "before")
    update_last_login(None, world.alice)
    assert api_redis.client().get(caches.EPOCH_KEY) == b"before"
    world.alice.first_name = "Alice"
    world.alice.save()
    assert api_redis.client().get(caches.EPOCH_KEY) != b"before"
