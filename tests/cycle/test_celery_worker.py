"""One real Celery worker against real Redis: a submission's nudge reaches the cycle."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.models import Job

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_submission_is_admitted_by_a_real_worker_through_its_nudge(
    world: Any, submit: Any, backend: Any, cluster_file: Path, tmp_path: Path
) -> None:
    sync_cluster(backend)
    db = connection.settings_dict
    host = db["HOST"] or db["OPTIONS"].get("host", "")
    env = dict(
        os.environ,
        DATABASE_URL=f"postgresql://{db['USER']}:@/{db['NAME']}?host={host}",
        GPUQUEUE_SIM_CLUSTER=str(cluster_file),
    )
    log_file = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - the worker outlives this block
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "gpuqueue.celery",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    try:
        job = submit(workers=2, gpus_per_worker=4)  # on commit: run_admission_cycle.delay()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job.refresh_from_db()
            if job.state != JobState.PENDING:
                break
            time.sleep(0.3)
        log = (tmp_path / "worker.log").read_text()
        assert job.state == JobState.ADMITTED, log
        assert "gpuqueue.run_admission_cycle" in log
        assert Job.objects.get(pk=job.pk).attempts == 1
    finally:
        worker.terminate()
        worker.wait(30)
        log_file.close()
