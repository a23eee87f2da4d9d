"""`make run` is quiet by default: warnings, errors and a summary line per admission cycle that
admitted or preempted something (and per cluster pass in which jobs finished), not a line per
request, per task and per cycle. `make run V=1` (GPUQUEUE_VERBOSE=1) logs everything."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gpuqueue.ops.launcher import GRANIAN_ARGS
from gpuqueue.ops.run_logging import celery_args, run_log_level, web_server_args
from tests.foundation.running_service import Service


@pytest.mark.parametrize(
    ("environ", "level"),
    [
        ({}, "WARNING"),
        ({"GPUQUEUE_VERBOSE": "1"}, "INFO"),
        ({"GPUQUEUE_VERBOSE": "0"}, "WARNING"),
        ({"GPUQUEUE_LOG_LEVEL": "debug"}, "DEBUG"),
        ({"GPUQUEUE_VERBOSE": "1", "GPUQUEUE_LOG_LEVEL": "ERROR"}, "ERROR"),
    ],
)
def test_the_level_is_warning_unless_verbose_or_set(environ: dict[str, str], level: str) -> None:
    assert run_log_level(environ) == level


def test_access_log_and_banners_only_when_verbose() -> None:
    quiet = web_server_args(GRANIAN_ARGS, "WARNING")
    assert "--access-log" not in quiet and quiet[-2:] == ["--log-level", "warning"]
    verbose = web_server_args(GRANIAN_ARGS, "INFO")
    assert "--access-log" in verbose and verbose[-2:] == ["--log-level", "info"]
    assert "--quiet" in celery_args("WARNING") and "--quiet" not in celery_args("INFO")


@pytest.fixture
def quiet_service() -> Iterator[Service]:
    svc = Service()
    del svc.env["GPUQUEUE_LOG_LEVEL"]  # the default, as `make run` has it
    svc.env.pop("GPUQUEUE_VERBOSE", None)
    yield svc
    svc.close()


@pytest.mark.slow
def test_make_run_logs_a_summary_per_cycle_that_did_something_and_little_else(
    quiet_service: Service,
) -> None:
    service = quiet_service
    service.start()
    token = service.token("alice")
    body = {
        "team": "team-a",
        "flavor": "h100",
        "name": "quiet",
        "image": "ghcr.io/acme/train:1",
        "annotations": {"gpuqueue.dev/sim-duration-seconds": "2"},
    }
    job = service.api("POST", "/api/v1/jobs/", token, body)
    service.wait_for(token, job["id"], "SUCCEEDED")
    for _ in range(10):  # a few more polls and idle cycles (one a second)
        service.api("GET", f"/api/v1/jobs/{job['id']}/", token)
        time.sleep(0.5)
    assert service.stop() == 0
    log = (service.data_dir.parent / "launcher.log").read_text(errors="replace")
    assert "cycle: 1 admitted, 0 preempted; 0 pending" in log
    assert "gpuqueue.summary: cluster: 1 finished (1 succeeded)" in log
    assert log.count("admitted, 0 preempted") == 1, log[-3000:]  # cycles that did nothing: none
    # No line per request (the web server's access log), per task (Celery's "received" and
    # "succeeded"), per beat tick or per cycle (the cycle's timings), nor Celery's banners.
    assert f"GET /api/v1/jobs/{job['id']}/" not in log
    assert "gpuqueue.run_admission_cycle" not in log
    assert "Sending due task" not in log
    assert "1_lock" not in log
    assert "[queues]" not in log and "beat v" not in log
