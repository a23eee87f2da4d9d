"""Slow clients cannot take the web server: requests that declare a body and never send it wait
outside the application's threads, for a bounded time and in bounded number, while `/healthz`
and everyone else are answered.

The web server is the one `make run` starts (the launcher, Granian and its front), with its
threads as few as on a small machine (one worker)."""

from __future__ import annotations

import json
import re
import socket
import statistics
import time
import urllib.request
from collections.abc import Iterator

import pytest

from gpuqueue.ops.launcher import GRANIAN_ARGS
from tests.foundation.running_service import ROOT, Service

pytestmark = pytest.mark.slow

SLOW_CLIENTS = 64
BODY_SECONDS = 8  # the service's body timeout in this test (GPUQUEUE_WEB_BODY_SECONDS)
MAX_RECEIVING = 80  # bodies received at once (GPUQUEUE_WEB_MAX_RECEIVING; one worker)


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    svc = Service(prepared=True)
    svc.env["GPUQUEUE_WEB_BODY_SECONDS"] = str(BODY_SECONDS)
    svc.env["GPUQUEUE_WEB_MAX_RECEIVING"] = str(MAX_RECEIVING)
    svc.start()
    yield svc
    svc.close_soon()


def stalled(
    service: Service, path: str, headers: dict[str, str], length: int = 1_000_000
) -> socket.socket:
    """A connection that sends a request's headers, announcing a body of `length` bytes, and
    then nothing."""
    sock = socket.create_connection(("127.0.0.1", service.port), timeout=30)
    lines = [f"POST {path} HTTP/1.1", "Host: localhost", f"Content-Length: {length}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return sock


def csrf_cookie(service: Service) -> str:
    with urllib.request.urlopen(f"{service.url}/accounts/login/", timeout=15) as response:
        cookies = response.headers.get_all("Set-Cookie")
    return next(c.split(";")[0] for c in cookies if c.startswith("csrftoken="))


def healthz_seconds(service: Service) -> float:
    started = time.monotonic()
    with urllib.request.urlopen(f"{service.url}/healthz", timeout=15) as response:
        assert response.status == 200
    return time.monotonic() - started


def test_a_response_the_application_streams_arrives_whole(service: Service) -> None:
    """Static files come in several chunks (whitenoise), which the front relays one by one."""
    expected = (ROOT / "static" / "vendor" / "htmx.min.js").read_bytes()
    assert len(expected) > 8192  # more than one chunk of a file response
    with urllib.request.urlopen(f"{service.url}/static/vendor/htmx.min.js", timeout=15) as got:
        assert got.status == 200
        assert got.read() == expected


def test_healthz_answers_within_a_second_while_64_slow_clients_hold_connections(
    service: Service,
) -> None:
    token = service.token("alice")
    form = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": csrf_cookie(service)}
    api = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    sockets = []
    try:
        for i in range(SLOW_CLIENTS):
            # Anonymous through the sign-in form, with the CSRF cookie anyone gets (so that the
            # form's body is read), and with a token on the API, under its body cap.
            if i % 2:
                sockets.append(stalled(service, "/accounts/login/", form))
            else:
                sockets.append(stalled(service, "/api/v1/jobs/", api, length=60_000))
        time.sleep(1)  # let every request reach the server
        tries = []
        for _ in range(5):
            try:
                tries.append(healthz_seconds(service))
            except OSError:  # a timeout: the server is taken
                tries.append(float("inf"))
        # The promise is one second; the median of five keeps a loaded 2-core machine's hiccup
        # from failing it, while a taken server (every try past 15 s) cannot pass.
        print(f"/healthz with {SLOW_CLIENTS} slow clients: {[f'{t:.3f}' for t in tries]} s")
        assert statistics.median(tries) < 1.0, tries
        assert max(tries) < 5.0, tries
        for sock in sockets:  # and they still hold their connections: nothing answered yet
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in sockets:
            sock.close()


def test_a_body_that_never_arrives_is_answered_408_and_the_connection_closed(
    service: Service,
) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": csrf_cookie(service)}
    sock = stalled(service, "/accounts/login/", form)
    try:
        started = time.monotonic()
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        waited = time.monotonic() - started
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert BODY_SECONDS - 1 <= waited < BODY_SECONDS + 5, waited


def test_past_the_bound_on_bodies_in_flight_a_request_is_refused_at_once(
    service: Service,
) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": csrf_cookie(service)}
    sockets = [stalled(service, "/accounts/login/", form) for _ in range(MAX_RECEIVING)]
    try:
        time.sleep(1)
        started = time.monotonic()
        extra = stalled(service, "/accounts/login/", form)
        sockets.append(extra)
        answer = extra.recv(4096)
        assert time.monotonic() - started < 5.0
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"retry-after: 5" in answer.lower()
        assert healthz_seconds(service) < 5.0  # the application's threads are all free
    finally:
        for sock in sockets:
            sock.close()


def test_every_deployment_starts_the_web_server_as_make_run_does() -> None:
    """The chart, the plain manifests, docker-compose and the image run Granian with the
    launcher's arguments: the front and the header timeout everywhere."""
    for name in (
        "deploy/helm/gpuqueue/templates/web.yaml",
        "deploy/base/web.yaml",
        "docker-compose.yml",
        "Dockerfile",
    ):
        line = next(line for line in (ROOT / name).read_text().splitlines() if '["granian"' in line)
        command = json.loads(line[line.index("[") : line.rindex("]") + 1])
        fixed = list(GRANIAN_ARGS)
        starts = [i for i in range(len(command)) if command[i : i + len(fixed)] == fixed]
        assert command[0] == "granian" and starts == [1], (name, command)
        assert "--blocking-threads" not in command, name  # the front's threads, not Granian's


def test_the_front_s_settings_are_in_the_readme() -> None:
    front = (ROOT / "gpuqueue" / "ops" / "web_front.py").read_text()
    names = set(re.findall(r'env_[a-z]+\(\s*"([A-Z0-9_]+)"', front))
    readme = (ROOT / "README.md").read_text()
    assert len(names) == 4 and all(f"`{name}`" in readme for name in names), names


def test_a_body_announced_over_the_cap_is_refused_before_it_is_read(service: Service) -> None:
    sock = stalled(service, "/api/v1/jobs/", {"Content-Type": "application/json"}, 2 << 20)
    try:
        answer = sock.recv(4096)
    finally:
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert json.loads(body)["error"]["code"] == "too_large"  # the API's error shape
