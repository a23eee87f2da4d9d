"""gpuqueue/client/workload.py, the workload's side: annotations file, SIGTERM, and the
acknowledgement against a real local HTTP endpoint (a stdlib server recording what it is sent)."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuqueue.client import workload


class Recorder(BaseHTTPRequestHandler):
    answers: list[tuple[int, dict[str, Any]]] = []
    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append(
            {"path": self.path, "auth": self.headers["Authorization"], "body": json.loads(body)}
        )
        status, answer = self.answers.pop(0) if self.answers else (200, {"acknowledged": True})
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Recorder]]:
    Recorder.answers, Recorder.seen = [], []
    server = HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("GPUQUEUE_URL", f"http://127.0.0.1:{server.server_port}/")
    monkeypatch.setenv("GPUQUEUE_JOB_ID", "42")
    monkeypatch.setenv("GPUQUEUE_JOB_TOKEN", "gqj_42_secret")
    yield Recorder
    server.shutdown()
    server.server_close()


def test_the_annotations_file_says_when_a_checkpoint_is_requested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "annotations"
    monkeypatch.setenv("GPUQUEUE_ANNOTATIONS_FILE", str(path))
    assert not workload.checkpoint_requested()  # no file yet
    path.write_text('owner="alice"\nbatch.kubernetes.io/job-completion-index="0"\n')
    assert not workload.checkpoint_requested()
    path.write_text('owner="alice"\ngpuqueue.dev/checkpoint-requested="2026-11-22T10:02:00Z"\n')
    assert workload.checkpoint_requested()
    assert workload.checkpoint_deadline().isoformat() == "2026-11-22T10:02:00+00:00"


def test_sigterm_counts_as_a_checkpoint_request_once_hooked(tmp_path: Path) -> None:
    previous = signal.getsignal(signal.SIGTERM)
    called: list[bool] = []
    try:
        workload.install_sigterm_hook(lambda: called.append(True))
        os.kill(os.getpid(), signal.SIGTERM)
        assert workload.checkpoint_requested(str(tmp_path / "none")) and called == [True]
    finally:
        signal.signal(signal.SIGTERM, previous)
        workload._sigterm.clear()


def test_acknowledge_posts_the_location_with_the_job_token(endpoint: Any) -> None:
    assert workload.acknowledge("s3://ckpt/42/step-9") is True
    (seen,) = endpoint.seen
    assert seen == {
        "path": "/api/v1/jobs/42/checkpointed/",
        "auth": "Bearer gqj_42_secret",
        "body": {"location": "s3://ckpt/42/step-9"},
    }


def test_acknowledge_retries_a_5xx_and_reports_a_409_as_not_requested(endpoint: Any) -> None:
    endpoint.answers = [(503, {}), (200, {"acknowledged": True}), (409, {"error": {}})]
    assert workload.acknowledge("x", backoff=0) is True
    assert len(endpoint.seen) == 2
    assert workload.acknowledge("x", backoff=0) is False


def test_acknowledge_raises_when_the_token_is_refused(endpoint: Any) -> None:
    endpoint.answers = [(401, {"error": {"message": "Invalid job token."}})]
    with pytest.raises(workload.AcknowledgeError, match="401"):
        workload.acknowledge("x", backoff=0)


def test_resume_from_reads_the_checkpoint_only_on_a_resumed_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUQUEUE_CHECKPOINT", "s3://ckpt/1")
    assert workload.resume_from() is None
    monkeypatch.setenv("GPUQUEUE_RESUME", "1")
    monkeypatch.setenv("GPUQUEUE_ATTEMPT", "2")
    assert workload.resume_from() == "s3://ckpt/1" and workload.attempt() == 2


def test_register_records_a_save_made_while_running_and_says_when_nothing_can(
    endpoint: Any,
) -> None:
    endpoint.answers = [
        (200, {"job": 42, "acknowledged": False, "registered": True, "location": "s3://a"}),
        (200, {"job": 42, "acknowledged": False, "registered": True, "location": "s3://a"}),
        (200, {"job": 42, "acknowledged": True, "location": "s3://b"}),
        (409, {"error": {}}),
    ]
    assert workload.register("s3://a", backoff=0) is True
    assert workload.acknowledge("s3://a", backoff=0) is False  # registered, not requested
    assert workload.register("s3://b", backoff=0) is True  # while preempting: acknowledged
    assert workload.register("s3://c", backoff=0) is False
    assert [seen["body"]["location"] for seen in endpoint.seen] == [
        "s3://a",
        "s3://a",
        "s3://b",
        "s3://c",
    ]
