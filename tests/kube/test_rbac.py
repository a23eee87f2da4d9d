"""On a real control plane: the permissions in deploy/ are enough for everything gpuqueue does to
a cluster, and no more. gpuqueue acts here as its own ServiceAccount, with a token the API
server issued for it, under deploy/base/rbac.yaml and the example team RoleBindings."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.base import ClusterError
from gpuqueue.cluster.k8s_calls import Caller
from gpuqueue.cluster.k8s_watch import run_watcher
from gpuqueue.cluster.kubernetes import KubernetesBackend
from gpuqueue.cluster.manifests import CHECKPOINT_ANNOTATION, ClusterOptions
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


def test_gpuqueue_s_own_account_can_do_everything_gpuqueue_does(
    kube: Kube, as_gpuqueue: client.ApiClient, submit: Any, world: Any
) -> None:
    backend = KubernetesBackend(
        as_gpuqueue,
        options=ClusterOptions(public_url="http://gpuqueue.test", gang_pdb=True),
        caller=Caller(attempts=1, backoff_seconds=0),
        namespaces=lambda: ["team-a", "team-b"],
    )
    # Inventory (nodes and pods cluster-wide), launch (Secret, Service, PDB, Job), release (patch
    # pods), follow (Jobs per team namespace): the gang runs.
    kube.sync_until(lambda: True, backend=backend)
    job = submit(workers=2, gpus_per_worker=4, annotations=LONG)
    run_cycle(backend=backend)
    kube.sync_until(lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING, backend=backend)
    # The checkpoint request (patch pods), then the stop (delete all three).
    backend.request_checkpoint(job.pk, 1, datetime.now(UTC) + timedelta(minutes=5))
    pods = kube.pods("team-a", selector=f"gpuqueue.dev/job-id={job.pk}")
    assert len(pods) == 2
    assert all(CHECKPOINT_ANNOTATION in p["metadata"]["annotations"] for p in pods)
    backend.stop(job.pk, 1)
    kube.wait(lambda: not kube.jobs("team-a"))
    # Why pods were refused (list events): a quota in team-b refuses the gang.
    kube.core.create_namespaced_resource_quota(
        "team-b",
        {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "1"}}},
    )
    refused = submit(world.carol, team=world.team_b, gpus_per_worker=4, annotations=LONG)
    run_cycle(backend=backend)
    kube.sync_until(
        lambda: Job.objects.get(pk=refused.pk).state == JobState.PENDING, backend=backend
    )
    assert "exceeded quota" in Job.objects.get(pk=refused.pk).events.last().reason


def test_gpuqueue_s_own_account_may_not_act_outside_team_namespaces_or_on_nodes(
    kube: Kube, as_gpuqueue: client.ApiClient, submit: Any, world: Any
) -> None:
    core, batch = client.CoreV1Api(as_gpuqueue), client.BatchV1Api(as_gpuqueue)
    job = {
        "metadata": {"name": "sneaky"},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            }
        },
    }
    forbidden = [
        lambda: batch.create_namespaced_job("others", job),  # not a team namespace
        lambda: core.list_secret_for_all_namespaces(),  # secrets: only its own, by name
        lambda: core.patch_node("h100-0", {"metadata": {"labels": {"x": "y"}}}),
        lambda: core.delete_namespaced_pod("anything", "others"),
        lambda: core.create_namespaced_pod(
            "team-a", {"metadata": {"name": "p"}, **job["spec"]["template"]}
        ),
    ]
    for call in forbidden:
        with pytest.raises(ApiException) as refused:
            call()
        assert refused.value.status == 403
    # The backend turns such a refusal into a permanent error that fails the job.
    backend = KubernetesBackend(
        as_gpuqueue,
        caller=Caller(attempts=1, backoff_seconds=0),
        namespaces=lambda: ["team-a", "team-b"],
    )
    with pytest.raises(ClusterError) as error:
        backend.list_raw_jobs("others")
    assert not error.value.transient and "forbidden" in str(error.value)


def test_a_team_namespace_without_the_rolebinding_stops_nothing_else(
    kube: Kube, as_gpuqueue: client.ApiClient, submit: Any, world: Any
) -> None:
    """`others` has no RoleBinding for gpuqueue (403 on its Jobs): the watcher still syncs the
    other namespaces, and the job of the team that lives there is left as it is, not taken for
    gone."""
    from teams.models import Team

    stranded_team = Team.objects.create(slug="team-c", name="Team C", namespace="others")
    stranded = submit(world.root, team=stranded_team)
    Job.objects.filter(pk=stranded.pk).update(
        state=JobState.RUNNING, attempts=1, placement={"h100-3": 1}, admitted_at=timezone.now()
    )
    backend = KubernetesBackend(
        as_gpuqueue,
        options=ClusterOptions(public_url="http://gpuqueue.test"),
        caller=Caller(attempts=1, backoff_seconds=0.1),
        namespaces=lambda: ["team-a", "team-b", "others"],
    )
    job = submit(workers=2, gpus_per_worker=4, annotations=LONG)
    deadline = time.monotonic() + 60

    def done() -> bool:
        if time.monotonic() > deadline:
            raise AssertionError("the watcher did not run the job within 60 s")
        if Job.objects.get(pk=job.pk).state == JobState.PENDING:
            run_cycle(backend=backend)  # after the first pass: it needs the inventory
        return Job.objects.get(pk=job.pk).state == JobState.RUNNING

    run_watcher(
        backend,
        done,
        lambda: sync_cluster(backend),
        sync_seconds=0.2,
        resync_seconds=60,
        watch_seconds=30,
    )
    assert backend.unseen_namespaces() == frozenset({"others"})
    assert Job.objects.get(pk=stranded.pk).state == JobState.RUNNING
