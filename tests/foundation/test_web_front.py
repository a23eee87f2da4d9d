"""The web front's bound on bodies in memory holds while requests wait for the application,
not only while their bodies arrive (fast clients could otherwise queue bodies without end)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from gpuqueue.ops.web_front import WebFront


def scope(method: str = "POST", length: int = 3) -> dict[str, Any]:
    return {
        "type": "http",
        "method": method,
        "path": "/api/v1/jobs/",
        "raw_path": b"/api/v1/jobs/",
        "query_string": b"",
        "http_version": "1.1",
        "headers": [(b"content-length", str(length).encode())],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }


def test_a_body_waiting_for_its_answer_keeps_its_slot() -> None:
    release = threading.Event()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        release.wait(10)  # the only thread is busy: the next request queues
        start_response("201 Created", [("Content-Type", "text/plain")])
        return [environ["wsgi.input"].read()]

    front = WebFront(app, threads=1, body_seconds=5, max_body_bytes=1024, max_receiving=1)
    sent: list[list[dict[str, Any]]] = [[], []]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"abc", "more_body": False}

    def sender(i: int) -> Any:
        async def send(message: dict[str, Any]) -> None:
            sent[i].append(message)

        return send

    async def main() -> None:
        first = asyncio.create_task(front(scope(), receive, sender(0)))
        await asyncio.sleep(0.2)  # its body has arrived; it waits for the application
        await front(scope(), receive, sender(1))
        release.set()
        await first

    asyncio.run(main())
    assert sent[1][0]["status"] == 503  # the first body still holds the only slot
    assert sent[0][0]["status"] == 201 and sent[0][1]["body"] == b"abc"
    assert front.receiving == 0  # every slot given back
