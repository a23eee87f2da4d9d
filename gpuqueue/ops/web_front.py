"""The web server's front: a request reaches the application's threads only with its whole body.

Granian serves Django's WSGI application from a few threads per worker, and under its WSGI
interface a thread reads the request body as the view asks for it, with no time limit: a client
that announces a body and never sends it holds that thread for good, and a handful of such
clients (anonymous, through the sign-in form) took every thread and `/healthz` with them.

So Granian runs this ASGI application instead (`--interface asginl`), and it:

1. receives a request's body on the event loop, where a waiting connection costs a coroutine,
   not a thread: at most GPUQUEUE_WEB_BODY_SECONDS for the whole body (408 past it), at most
   GPUQUEUE_WEB_MAX_BODY_BYTES (413, before reading when the announced length says so), and at
   most GPUQUEUE_WEB_MAX_RECEIVING bodies at once per worker, from their first byte until
   their answer is sent (503 with Retry-After beyond, at once), so that the bodies in memory
   stay bounded too, queued for a thread or not;
2. then runs Django's WSGI application (gpuqueue/wsgi.py, unchanged) in a pool of
   GPUQUEUE_WEB_THREADS threads per worker, with the body in memory;
3. sends the response back: whole when the application returned it whole, chunk by chunk when
   it streams.

A request that announces no body goes straight to step 2. Slow headers are Granian's to cut off
(`--http1-header-read-timeout`, gpuqueue/ops/launcher.py).
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote_to_bytes

from gpuqueue.config import env_float, env_int

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
RETRY_AFTER_SECONDS = 5


class _TooLarge(Exception):
    pass


class _Gone(Exception):
    """The client disconnected before its body arrived: nobody to answer."""


class WebFront:
    def __init__(
        self,
        app: WSGIApp,
        *,
        threads: int,
        body_seconds: float,
        max_body_bytes: int,
        max_receiving: int,
    ) -> None:
        self.app = app
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="gpuqueue-web")
        self.body_seconds = body_seconds
        self.max_body_bytes = max_body_bytes
        self.max_receiving = max_receiving
        self.receiving = 0  # bodies being received now; the event loop's thread only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no websockets (Granian runs with --no-ws), no lifespan (asginl)
        headers = scope["headers"]
        length = _content_length(headers)
        chunked = any(name == b"transfer-encoding" for name, _ in headers)
        body = b""
        holding = False  # a slot of max_receiving, kept until the answer is sent
        try:
            if (length or 0) > 0 or chunked or (length is None and scope["method"] in BODY_METHODS):
                if length is not None and length > self.max_body_bytes:
                    await _refuse(send, scope, 413, "too_large", self._too_large(length))
                    return
                if self.receiving >= self.max_receiving:
                    await _refuse(
                        send,
                        scope,
                        503,
                        "busy",
                        "The server is receiving too many request bodies at once; try again in "
                        "a few seconds.",
                        retry_after=True,
                    )
                    return
                self.receiving += 1
                holding = True
                try:
                    async with asyncio.timeout(self.body_seconds):
                        body = await self._body(receive)
                except TimeoutError:
                    await _refuse(
                        send,
                        scope,
                        408,
                        "body_timeout",
                        f"The request body did not arrive within {self.body_seconds:g} seconds.",
                    )
                    return
                except _TooLarge:
                    await _refuse(send, scope, 413, "too_large", self._too_large(None))
                    return
                except _Gone:
                    return
            loop = asyncio.get_running_loop()
            environ = wsgi_environ(scope, body)
            whole = await loop.run_in_executor(self.pool, self._run, environ, loop, send)
            if whole is not None:
                start, content = whole
                await send(start)
                await send({"type": "http.response.body", "body": content})
        finally:
            if holding:
                self.receiving -= 1

    async def _body(self, receive: Receive) -> bytes:
        parts = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            parts += message.get("body", b"")
            if len(parts) > self.max_body_bytes:
                raise _TooLarge
            if not message.get("more_body"):
                return bytes(parts)

    def _too_large(self, length: int | None) -> str:
        said = f"is {length} bytes" if length is not None else "is larger"
        return f"The request body {said}; at most {self.max_body_bytes}."

    def _run(
        self, environ: dict[str, Any], loop: asyncio.AbstractEventLoop, send: Send
    ) -> tuple[Message, bytes] | None:
        """Call the WSGI application (in a pool thread). Returns the response start and its
        body when the application gave one chunk; a streamed response is sent from here, chunk
        by chunk, and None returned."""
        started: list[Message] = []

        def start_response(
            status: str, response_headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            if exc_info is not None and streaming:
                raise exc_info[1].with_traceback(exc_info[2])
            started[:] = [
                {
                    "type": "http.response.start",
                    "status": int(status.split(" ", 1)[0]),
                    "headers": [
                        (name.lower().encode("latin1"), value.encode("latin1"))
                        for name, value in response_headers
                    ],
                }
            ]
            return chunks.append  # WSGI's legacy write(): nothing here calls it

        async def relay(message: Message) -> None:
            await send(message)  # Granian's send returns an awaitable, not a coroutine

        def forward(message: Message) -> None:
            asyncio.run_coroutine_threadsafe(relay(message), loop).result()

        chunks: list[bytes] = []
        streaming = False
        result = self.app(environ, start_response)
        try:
            for chunk in result:
                if not chunk:
                    continue
                chunks.append(chunk)
                if len(chunks) > 1:  # more than one chunk: the application streams
                    if not streaming:
                        streaming = True
                        forward(started[0])
                    for pending in chunks:
                        forward({"type": "http.response.body", "body": pending, "more_body": True})
                    chunks.clear()
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()  # Django's request_finished: this thread's database connection
        if streaming:
            for pending in chunks:
                forward({"type": "http.response.body", "body": pending, "more_body": True})
            forward({"type": "http.response.body", "body": b""})
            return None
        return started[0], b"".join(chunks)


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(
    send: Send, scope: Scope, status: int, code: str, message: str, retry_after: bool = False
) -> None:
    """Answer without the application, in the API's error shape under /api/ (as
    gpuqueue/ops/request_guard.py does), and close the connection: its unread body would
    otherwise be taken for the next request."""
    if scope["path"].startswith("/api/"):
        content = json.dumps({"error": {"code": code, "message": message}}).encode()
        kind = b"application/json"
    else:
        content, kind = message.encode(), b"text/plain; charset=utf-8"
    headers = [
        (b"content-type", kind),
        (b"content-length", str(len(content)).encode()),
        (b"connection", b"close"),
    ]
    if retry_after:
        headers.append((b"retry-after", str(RETRY_AFTER_SECONDS).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def wsgi_environ(scope: Scope, body: bytes) -> dict[str, Any]:
    """PEP 3333's environ for an ASGI HTTP scope, with the body in memory."""
    raw_path = scope.get("raw_path") or scope["path"].encode()
    path = unquote_to_bytes(raw_path.split(b"?", 1)[0]).decode("latin1")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    server = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": root,
        "PATH_INFO": path,
        "QUERY_STRING": scope["query_string"].decode("latin1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1] if server[1] is not None else 80),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.input_terminated": True,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    client = scope.get("client")
    if client:
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = str(client[0]), str(client[1])
    for name, value in scope["headers"]:
        key = name.decode("latin1").upper()
        if "_" in key:
            # X_Forwarded_For would otherwise pass for X-Forwarded-For: a header a proxy in
            # front strips by its dashed name could be smuggled past it with underscores.
            continue
        key = key.replace("-", "_")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = f"HTTP_{key}"
        text = value.decode("latin1")
        if key in environ:
            text = environ[key] + ("; " if key == "HTTP_COOKIE" else ",") + text
        environ[key] = text
    return environ


def from_environment(app: WSGIApp) -> WebFront:
    """The front around `app`, configured from the environment (README lists the variables)."""
    return WebFront(
        app,
        threads=env_int("GPUQUEUE_WEB_THREADS", 2, minimum=1),
        body_seconds=env_float("GPUQUEUE_WEB_BODY_SECONDS", 30.0, minimum=1.0),
        max_body_bytes=env_int("GPUQUEUE_WEB_MAX_BODY_BYTES", 1024 * 1024, minimum=64 * 1024),
        max_receiving=env_int("GPUQUEUE_WEB_MAX_RECEIVING", 100, minimum=1),
    )
