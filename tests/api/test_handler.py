"""Token API requests take a shorter middleware chain (gpuqueue/handler.py) with the same
answers as the whole chain: the same status, headers, cookies and body."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.handlers.wsgi import WSGIHandler, WSGIRequest
from django.urls import URLPattern, URLResolver, get_resolver

from gpuqueue.handler import SKIPPED, ApiWSGIHandler, token_api_request


def environ(
    method: str,
    path: str,
    token: str | None = None,
    body: Any = None,
    keyword: str = "Bearer",
    **extra: str,
) -> dict[str, Any]:
    data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    path, _, query = path.partition("?")
    env = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "SCRIPT_NAME": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "wsgi.input": io.BytesIO(data),
        "wsgi.url_scheme": "http",
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }
    if data:
        env |= {"CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(data))}
    if token is not None:
        env["HTTP_AUTHORIZATION"] = f"{keyword} {token}"
    return env | extra


def answer(handler: Any, env: dict[str, Any], *, drop: tuple[str, ...] = ()) -> Any:
    env = dict(env, **{"wsgi.input": io.BytesIO(env["wsgi.input"].getvalue())})
    response = handler.get_response(WSGIRequest(env))
    body = response.content
    if drop:
        data = json.loads(body)
        body = {k: v for k, v in data.items() if k not in drop}
    headers = [(k, v) for k, v in response.items() if not (drop and k == "Content-Length")]
    return (response.status_code, headers, response.cookies.output(), body)


@pytest.fixture
def handlers(api: Any) -> tuple[WSGIHandler, ApiWSGIHandler]:
    whole, short = WSGIHandler(), ApiWSGIHandler()
    assert short._short is not None
    return whole, short


def test_token_api_requests_answer_as_through_the_whole_chain(
    handlers: tuple[WSGIHandler, ApiWSGIHandler], tokens: dict[str, str], submit: Any
) -> None:
    whole, short = handlers
    alice, root = tokens["alice"], tokens["root"]
    job = submit(key="first")
    body = {"flavor": "h100", "image": "ghcr.io/acme/train:1", "workers": 2}
    requests = [
        environ("GET", "/api/v1/jobs/", alice),
        environ("GET", "/api/v1/jobs/?state=PENDING", root),
        environ("GET", f"/api/v1/jobs/{job.pk}/", alice),
        environ("GET", f"/api/v1/jobs/{job.pk}/events/", alice, keyword="Token"),
        environ("GET", "/api/v1/jobs/999999/", alice),
        environ("GET", "/api/v1/me/", alice, HTTP_ACCEPT="application/json"),
        environ("GET", "/api/v1/utilization/", alice, HTTP_ACCEPT="*/*"),
        environ("GET", "/api/v1/nope", alice),
        environ("GET", "/api/v1/jobs", alice),  # CommonMiddleware: APPEND_SLASH
        environ("GET", "/api/v1/jobs/", "gq_nope_nope"),
        environ("GET", "/api/v1/jobs/", "a b"),
        environ("GET", "/api/v1/jobs/", alice, HTTP_HOST="evil.example"),
        environ("POST", "/api/v1/jobs/", alice, {"flavor": "h100"}),
        environ("POST", "/api/v1/jobs/", alice, b"{not json"),
        environ("POST", "/api/v1/jobs/", alice, b"[" + b" " * 70000 + b"]"),
        environ("POST", "/api/v1/jobs/", alice, body, HTTP_IDEMPOTENCY_KEY="first"),
        environ("POST", "/api/v1/jobs/", alice, body, HTTP_IDEMPOTENCY_KEY="x" * 201),
        environ("PUT", "/api/v1/jobs/", alice, body),
        environ("OPTIONS", "/api/v1/jobs/", alice),
        environ("HEAD", "/api/v1/jobs/", alice),
        environ("POST", f"/api/v1/jobs/{job.pk}/checkpointed/", alice, {"location": "s3://x"}),
        environ("DELETE", "/api/v1/flavors/h100/", alice),
    ]
    for env in requests:
        assert token_api_request(env, env["PATH_INFO"])
        assert answer(short, env) == answer(whole, env), (env["REQUEST_METHOD"], env["PATH_INFO"])
    # Not for the shorter chain (a cookie; DRF's browsable API, whose CSRF cookie is new
    # each time): the whole chain.
    for env in (
        environ("GET", "/api/v1/jobs/", alice, HTTP_COOKIE="theme=dark"),
        environ("GET", "/api/v1/jobs/", alice, HTTP_ACCEPT="text/html"),
        environ("GET", "/api/v1/jobs/?format=api", alice),
        environ("GET", "/dashboard/", alice),
    ):
        assert not token_api_request(env, env["PATH_INFO"])
        assert answer(short, env)[0] == answer(whole, env)[0]
    # No token (session authentication is tried, which reads the session: Vary: Cookie).
    for env in (
        environ("GET", "/api/v1/jobs/"),
        environ("GET", "/api/v1/jobs/", "dXNlcjpwYXNz", keyword="Basic"),
    ):
        assert not token_api_request(env, env["PATH_INFO"])
        assert answer(short, env) == answer(whole, env)
        assert ("Vary", "Accept, Cookie") in answer(whole, env)[1]
    # Submissions: each makes a job of its own; the same answer but for id, key and time.
    drop = ("id", "idempotency_key", "submitted_at")
    for key in ("a", "b"):
        envs = [
            environ("POST", "/api/v1/jobs/", alice, body, HTTP_IDEMPOTENCY_KEY=f"{key}{n}")
            for n in (1, 2)
        ]
        assert answer(short, envs[0], drop=drop) == answer(whole, envs[1], drop=drop)


def test_the_shorter_chain_is_taken_and_leaves_out_what_it_says(
    handlers: tuple[WSGIHandler, ApiWSGIHandler], tokens: dict[str, str]
) -> None:
    whole, short = handlers
    seen = {}

    def remember(request: Any) -> Any:
        seen["request"] = request
        return chain(request)

    for handler in (whole, short):
        holder = handler if handler is whole else handler._short
        chain = holder._middleware_chain
        holder._middleware_chain = remember
        try:
            answer(handler, environ("GET", "/api/v1/me/", tokens["alice"]))
        finally:
            holder._middleware_chain = chain
        request = seen.pop("request")
        assert hasattr(request, "session") is (handler is whole)
        assert hasattr(request, "htmx") is (handler is whole)
    assert len(SKIPPED) == 6


def test_every_api_route_is_csrf_exempt() -> None:
    """The shorter chain leaves CsrfViewMiddleware out because no view under /api/v1/ wants
    its check; a new view that did would need the whole chain."""

    def views(patterns: list[Any]) -> list[Any]:
        found = []
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                found += views(pattern.url_patterns)
            elif isinstance(pattern, URLPattern):
                found.append(pattern.callback)
        return found

    api = next(
        p
        for p in get_resolver().url_patterns
        if isinstance(p, URLResolver) and str(p.pattern) == "api/v1/"
    )
    callbacks = views(api.url_patterns)
    assert len(callbacks) > 20
    for callback in callbacks:
        assert getattr(callback, "csrf_exempt", False), callback
