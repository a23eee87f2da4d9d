"""GET /api/v1/jobs/{id}/logs/ on the simulated cluster: the lines of one worker of the current
attempt, cut as asked; 400 for a worker or tail out of range, 404 for a job that never started
or a worker that is gone, 503 with Retry-After when the cluster cannot be reached."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from kubernetes import client

from gpuqueue.cluster.k8s_calls import Caller
from gpuqueue.cluster.kubernetes import KubernetesBackend
from gpuqueue.cluster.simulated import DURATION_ANNOTATION, SimulatedBackend
from gpuqueue.core.states import JobState
from gpuqueue.cycle.launch import launch_spec
from gpuqueue.models import Job, WorkloadRecord
from gpuqueue.services.jobs.transitions import transition


def start_job(job: Any, cluster_file: Path, *, ran_for: float = 30, node: str = "h100-0") -> Job:
    """Admit the job and launch it on the simulated cluster as if that happened `ran_for`
    seconds ago (the workload starts at once)."""
    transition(
        job,
        JobState.ADMITTED,
        reason="fits",
        actor="cycle",
        placement={node: job.workers},
        admitted_at=timezone.now(),
        attempts=job.attempts + 1,
    )
    job = Job.objects.select_related("team", "flavor").get(pk=job.pk)
    then = timezone.now() - timedelta(seconds=ran_for)
    SimulatedBackend(cluster_file, startup_seconds=0, clock=lambda: then).launch(launch_spec(job))
    return job


@pytest.fixture
def finished(submit: Any, cluster_file: Path) -> Job:
    """alice's 2-worker job that ran 20 s and exited 30 s ago, its workload still kept."""
    job = submit(workers=2, annotations={DURATION_ANNOTATION: "20"})
    return start_job(job, cluster_file, ran_for=30)


def logs(api: Any, job_id: int, persona: str = "alice", **query: Any) -> Any:
    return api(persona).get(f"/api/v1/jobs/{job_id}/logs/", query)


def test_a_workers_whole_log_starts_steps_and_exits(api: Any, finished: Job) -> None:
    response = logs(api, finished.pk, worker=1)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["job"], body["worker"], body["attempt"], body["truncated"]) == (
        finished.pk,
        1,
        1,
        False,
    )
    lines = body["lines"]
    assert lines[0] == f"worker 1 of 2: attempt 1 of job {finished.pk} started"
    assert [line.split(" loss ")[0] for line in lines[1:-1]] == [f"step {n}" for n in range(1, 21)]
    assert lines[-1] == "worker 1 exited with code 0"
    # The same lines every time; another worker's losses differ.
    assert logs(api, finished.pk, worker=1).json()["lines"] == lines
    assert logs(api, finished.pk, worker=0).json()["lines"][1:-1] != lines[1:-1]


def test_tail_keeps_the_last_lines_and_worker_defaults_to_0(api: Any, finished: Job) -> None:
    body = logs(api, finished.pk, tail=2).json()
    assert body["worker"] == 0
    assert body["lines"][-1] == "worker 0 exited with code 0"
    assert body["lines"][0].startswith("step 20 loss ")
    assert len(body["lines"]) == 2


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"worker": 2}, "worker"),
        ({"worker": -1}, "worker"),
        ({"worker": "x"}, "worker"),
        ({"tail": 0}, "tail"),
        ({"tail": 10001}, "tail"),
        ({"since_seconds": 0}, "since_seconds"),
        ({"follow": 1}, "follow"),
    ],
    ids=str,
)
def test_a_worker_or_tail_out_of_range_is_400_at_the_field(
    api: Any, finished: Job, query: dict[str, Any], field: str
) -> None:
    response = logs(api, finished.pk, **query)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid" and list(error["fields"]) == [field]


def test_the_worker_message_names_the_range(api: Any, finished: Job) -> None:
    error = logs(api, finished.pk, worker=5).json()["error"]
    assert error["fields"]["worker"] == ["Between 0 and 1: the job has 2 workers."]


def test_a_job_that_never_started_is_404_not_started(api: Any, submit: Any) -> None:
    job = submit()
    response = logs(api, job.pk)
    assert response.status_code == 404
    assert response.json()["error"] == {
        "code": "not_started",
        "message": f"job {job.pk} has not started",
    }


def test_a_worker_whose_workload_is_gone_is_404(
    api: Any, finished: Job, cluster_file: Path
) -> None:
    SimulatedBackend(cluster_file).stop(finished.pk, 1)
    response = logs(api, finished.pk, worker=1)
    assert response.status_code == 404
    assert response.json()["error"]["message"] == f"job {finished.pk} has no worker 1 in attempt 1"


def test_another_teams_job_is_404_before_its_query_is_checked(api: Any, finished: Job) -> None:
    response = logs(api, finished.pk, "carol", worker=99)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_requeued_job_reads_its_new_attempt(api: Any, submit: Any, cluster_file: Path) -> None:
    job = start_job(submit(annotations={DURATION_ANNOTATION: "5"}), cluster_file, ran_for=10)
    transition(job, JobState.PENDING, reason="node lost", actor="cluster")
    job = start_job(Job.objects.get(pk=job.pk), cluster_file, ran_for=10)
    body = logs(api, job.pk).json()
    assert body["attempt"] == 2
    assert body["lines"][0] == f"worker 0 of 1: attempt 2 of job {job.pk} started"


def test_an_unreachable_cluster_is_503_with_retry_after(
    api: Any, finished: Job, monkeypatch: Any
) -> None:
    """The Kubernetes backend against a port where nothing listens: one try, then 503."""
    # The Job uid a Kubernetes launch records, so that the backend has pods to ask the API for.
    assert WorkloadRecord.objects.filter(job_id=finished.pk, attempt=1).update(job_uid="u") == 1
    configuration = client.Configuration(host="http://127.0.0.1:9")
    configuration.retries = 0
    away = KubernetesBackend(
        client.ApiClient(configuration), caller=Caller(attempts=3), timeout_seconds=2
    )
    monkeypatch.setattr("gpuqueue.services.cluster.logs.get_backend", lambda: away)
    response = logs(api, finished.pk)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "unavailable"
