"""On a real control plane: what gpuqueue believes comes only from what it made.

A member of another team (team-b), or of the job's own team, writes gpuqueue's labels on objects
of their own: pods that fail or are evicted, a Job that completes, a Secret or a Job under the
name gpuqueue will use for an attempt. None of it moves a job, points gpuqueue at another
namespace, or is adopted. A second install on the same namespaces refuses to start, and a
database restored from a backup deletes nothing it cannot prove it made.

The forged objects are made by the admin client here (the admission policy that keeps
gpuqueue's labels for gpuqueue, deploy/, is not installed in these tests): what is shown is
what gpuqueue itself believes.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.base import Claimed, ClusterError
from gpuqueue.cluster.k8s_watch import run_watcher
from gpuqueue.cluster.manifests import token_secret_name, workload_name
from gpuqueue.cluster.proof import MARKER
from gpuqueue.cluster.records import this_install
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.management.commands import watch_cluster
from gpuqueue.models import Job, WorkloadRecord
from gpuqueue.services.jobs.checkpoint import job_for_token
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


def state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def labelled_as(job: Job, attempt: int = 1) -> dict[str, str]:
    """Every label gpuqueue puts on an attempt's objects: anyone can copy them."""
    return {
        "app.kubernetes.io/managed-by": "gpuqueue",
        "gpuqueue.dev/job-id": str(job.pk),
        "gpuqueue.dev/attempt": str(attempt),
        "gpuqueue.dev/team": job.team.slug,
        "gpuqueue.dev/instance": "gpuqueue",
    }


def forge_job(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    pod_labels: dict[str, str] | None = None,
    exit_code: int = 0,
    seconds: int = 1,
    grace: int = 0,
) -> None:
    """A GPU-less batch Job someone other than gpuqueue made (its pods tolerate every taint, so
    kube-scheduler binds them and kwok runs them for `seconds`, then exits with `exit_code`)."""
    kube.batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {
                        "labels": pod_labels or {},
                        "annotations": {
                            "gpuqueue.dev/sim-duration-seconds": str(seconds),
                            "gpuqueue.dev/sim-exit-code": str(exit_code),
                        },
                    },
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": grace,
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "worker", "image": "busybox"}],
                    },
                },
            },
        },
    )


def pods_of(kube: Kube, namespace: str, job_name: str) -> list[dict[str, Any]]:
    return kube.pods(namespace, selector=f"batch.kubernetes.io/job-name={job_name}")


def condition(obj: dict[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def running_job(kube: Kube, submit: Any) -> Job:
    job = submit(workers=1, gpus_per_worker=1, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.RUNNING)
    return job


def passes(kube: Kube, count: int = 5) -> None:
    for _ in range(count):
        kube.sync_until(lambda: True)


def test_a_gpu_less_pod_in_another_namespace_labelled_as_the_job_that_exits_1_fails_nothing(
    kube: Kube, submit: Any
) -> None:
    job = running_job(kube, submit)
    forge_job(kube, "team-b", "lookalike", pod_labels=labelled_as(job), exit_code=1)
    kube.wait(
        lambda: any(
            p["status"].get("phase") == "Failed" for p in pods_of(kube, "team-b", "lookalike")
        )
    )
    passes(kube)
    assert state(job) == JobState.RUNNING and job.exit_code is None


def test_the_same_pod_evicted_by_its_owner_loses_nothing(kube: Kube, submit: Any) -> None:
    job = running_job(kube, submit)
    forge_job(kube, "team-b", "lookalike", pod_labels=labelled_as(job), seconds=3600, grace=60)
    kube.wait(
        lambda: any(
            p["status"].get("phase") == "Running" for p in pods_of(kube, "team-b", "lookalike")
        )
    )
    (pod,) = pods_of(kube, "team-b", "lookalike")
    name = pod["metadata"]["name"]
    kube.core.create_namespaced_pod_eviction(
        name, "team-b", {"metadata": {"name": name, "namespace": "team-b"}}
    )
    # The API marks the evicted pod DisruptionTarget; it lingers for its grace period.
    kube.wait(
        lambda: any(
            condition(p, "DisruptionTarget") and p["metadata"]["name"] == name
            for p in pods_of(kube, "team-b", "lookalike")
        )
    )
    passes(kube)
    assert state(job) == JobState.RUNNING
    assert job.events.filter(reason__contains="gang broken").count() == 0


def test_a_forged_complete_job_in_another_namespace_neither_ends_the_job_nor_redirects_stop(
    kube: Kube, submit: Any
) -> None:
    job = running_job(kube, submit)
    name = workload_name(job.pk, 1)
    forge_job(kube, "team-b", name, labels=labelled_as(job), pod_labels=labelled_as(job))
    kube.wait(lambda: any(condition(j, "Complete") for j in kube.jobs("team-b")))
    passes(kube)
    assert state(job) == JobState.RUNNING

    kube.backend.stop(job.pk, 1)
    kube.wait(
        lambda: (
            not [
                j
                for j in kube.jobs("team-a")
                if j["metadata"]["name"] == name and not j["metadata"].get("deletionTimestamp")
            ]
        )
    )
    # The forged Job in team-b is not gpuqueue's: stop() never went there.
    assert [j["metadata"]["name"] for j in kube.jobs("team-b")] == [name]


def test_lookalikes_in_the_job_s_own_namespace_without_the_ownerreference_count_for_nothing(
    kube: Kube, submit: Any
) -> None:
    job = running_job(kube, submit)
    # A Job labelled as the attempt's that completes, and pods labelled as its worker that fail
    # (their controller is someone else's Job): both in team-a itself.
    forge_job(kube, "team-a", "lookalike-job", labels=labelled_as(job), pod_labels=labelled_as(job))
    forge_job(kube, "team-a", "lookalike-pods", pod_labels=labelled_as(job), exit_code=1)
    kube.wait(
        lambda: (
            any(condition(j, "Complete") for j in kube.jobs("team-a"))
            and any(
                p["status"].get("phase") == "Failed"
                for p in pods_of(kube, "team-a", "lookalike-pods")
            )
        )
    )
    passes(kube)
    assert state(job) == JobState.RUNNING and job.exit_code is None


def test_a_squatted_token_secret_is_not_adopted_and_the_next_attempt_uses_another_name(
    kube: Kube, submit: Any, settings: Any
) -> None:
    settings.GPUQUEUE_START_BACKOFF_SECONDS = 0
    job = submit(workers=1, gpus_per_worker=1, annotations=LONG)
    known = f"gqj_{job.pk}_the-squatters-own-token"
    squatted = token_secret_name(job.pk, 1)
    kube.core.create_namespaced_secret(
        "team-a",
        {
            "metadata": {"name": squatted, "labels": labelled_as(job)},
            "stringData": {"token": known},
        },
    )
    run_cycle(backend=kube.backend)
    assert state(job) == JobState.PENDING and job.start_failures == 1
    assert (
        f"Secret team-a/{squatted} already exists and is not gpuqueue's" in job.events.last().reason
    )
    assert job_for_token(known) is None  # the squatter's token opens nothing
    assert not kube.jobs("team-a")  # nothing was started on the squatted name
    # Left alone: it is not gpuqueue's to delete.
    kept = kube.core.read_namespaced_secret(squatted, "team-a")
    assert base64.b64decode(kept.data["token"]).decode() == known

    def relaunched() -> bool:
        run_cycle(backend=kube.backend)
        return state(job) == JobState.RUNNING

    kube.sync_until(relaunched)
    assert job.attempts == 2
    assert [j["metadata"]["name"] for j in kube.jobs("team-a")] == [workload_name(job.pk, 2)]


def test_a_squatted_gpu_less_job_is_not_adopted_nor_deleted(
    kube: Kube, submit: Any, settings: Any
) -> None:
    job = submit(workers=1, gpus_per_worker=1, annotations=LONG)
    name = workload_name(job.pk, 1)
    forge_job(
        kube, "team-a", name, labels=labelled_as(job), pod_labels=labelled_as(job), seconds=3600
    )
    run_cycle(backend=kube.backend)
    assert state(job) == JobState.PENDING and job.start_failures == 1
    assert f"Job team-a/{name} already exists and is not gpuqueue's" in job.events.last().reason
    passes(kube, 2)
    assert state(job) == JobState.PENDING
    (squatter,) = kube.jobs("team-a")
    assert squatter["metadata"]["name"] == name and not squatter["metadata"].get(
        "deletionTimestamp"
    )
    # What this launch made for the attempt (its Secret, and the Service it owns) is gone.
    selector = f"gpuqueue.dev/job-id={job.pk}"
    kube.wait(lambda: not kube.core.list_namespaced_secret("team-a", label_selector=selector).items)


def test_a_second_install_on_the_same_namespaces_is_refused_at_start_with_a_sentence(
    kube: Kube, submit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    running_job(kube, submit)  # this install launched in team-a: the namespace is claimed
    kube.backend.claim(["team-a", "team-b"])
    marker = kube.core.read_namespaced_config_map(MARKER, "team-a")
    assert marker.data == {"instance": "gpuqueue", "install": kube.backend.install}

    staging = kube.new_backend(instance="staging", install="another-database")
    synced = threading.Event()
    with pytest.raises(Claimed) as refused:
        run_watcher(
            staging, lambda: False, synced.set, sync_seconds=1, resync_seconds=60, watch_seconds=5
        )
    assert "namespace team-a belongs to another gpuqueue install" in str(refused.value)
    assert "'staging'" in str(refused.value) and "refuses" in str(refused.value)
    assert not synced.is_set()  # refused before anything was synced
    # The watcher's command says the same sentence as a command error, not a traceback.
    monkeypatch.setattr(watch_cluster, "get_backend", lambda: staging)
    with pytest.raises(CommandError, match="namespace team-a belongs to another gpuqueue install"):
        call_command("watch_cluster")
    # It does not see this install's Jobs either (its instance is in its selector).
    assert staging.observe() == []
    # The database knows which install it belongs to.
    assert this_install("gpuqueue").instance == "gpuqueue"
    with pytest.raises(ClusterError, match="belongs to the gpuqueue install 'gpuqueue'"):
        this_install("staging")


def test_a_marker_someone_else_made_leaves_that_namespace_out_and_serves_the_others(
    kube: Kube, submit: Any, world: Any
) -> None:
    """A tenant cannot stop the whole install by taking the marker's name in their namespace:
    only their own namespace is left out."""
    with contextlib.suppress(ApiException):
        kube.core.delete_namespaced_config_map(MARKER, "team-b")
    kube.core.create_namespaced_config_map(
        "team-b", {"metadata": {"name": MARKER}, "data": {"instance": "whatever"}}
    )
    try:
        backend = kube.new_backend()
        synced = threading.Event()
        run_watcher(
            backend, synced.is_set, synced.set, sync_seconds=1, resync_seconds=60, watch_seconds=5
        )
        assert synced.is_set()  # it started, and synced
        assert "lacks gpuqueue's labels" in backend.refused["team-b"]
        assert "team-b" in backend.unseen_namespaces()
        theirs = submit(world.carol, team=world.team_b, workers=1, gpus_per_worker=1)
        ours = submit(workers=1, gpus_per_worker=1, annotations=LONG)
        run_cycle(backend=backend)
        assert state(theirs) == JobState.FAILED and "lacks gpuqueue's labels" in theirs.message
        kube.sync_until(lambda: state(ours) == JobState.RUNNING, backend=backend)
    finally:
        kube.core.delete_namespaced_config_map(MARKER, "team-b")


def test_a_database_restored_from_a_backup_deletes_no_gang_it_cannot_prove_it_made(
    kube: Kube, submit: Any, caplog: Any
) -> None:
    job = running_job(kube, submit)
    name = workload_name(job.pk, 1)
    # The backup was taken before the job was admitted: the restored database has it pending,
    # and no record of launching it.
    Job.objects.filter(pk=job.pk).update(
        state=JobState.PENDING, attempts=0, placement={}, admitted_at=None, started_at=None
    )
    WorkloadRecord.objects.filter(job_id=job.pk).delete()
    restarted = kube.new_backend()  # the install starts again on the restored database
    with caplog.at_level(logging.WARNING, logger="gpuqueue.cluster.kubernetes"):
        passes(kube, 3)
        kube.sync_until(lambda: True, backend=restarted)
    assert [j["metadata"]["name"] for j in kube.jobs("team-a")] == [name]
    assert not kube.jobs("team-a")[0]["metadata"].get("deletionTimestamp")
    assert any(
        "no record of launching attempt 1" in r.getMessage() and "will not delete" in r.getMessage()
        for r in caplog.records
    )
