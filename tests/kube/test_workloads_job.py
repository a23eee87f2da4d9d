"""On a real control plane, under deploy/'s admission policy: a user's own batch/v1 Job labelled
`gpuqueue.dev/queue` waits suspended, with no pod, and says why; gpuqueue admits it per plan
(every pod on its planned node), suspends it for a preemption and resumes it, cancels its job
when it is deleted, and deletes it when its job is cancelled. The policy refuses a GPU Job
without the label, one that names another team, and one that is not created suspended."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.sources import JOB_ANNOTATION, STATUS_ANNOTATION
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, JobSource
from gpuqueue.services.jobs.cancel import cancel_job
from tests.kube.conftest import Kube
from tests.kube.controlplane import api_client_for
from tests.kube.test_admission import (  # noqa: F401 - the fixtures, used by name
    guard,
    guarded,
    refused_by_policy,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"
LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
# Who may create Jobs in which team namespace: the cluster's RBAC, as a platform team grants it.
PEOPLE = {"alice": "team-a", "carol": "team-b"}


def labelled_job(
    name: str,
    team: str,
    workers: int,
    gpus: int,
    *,
    suspend: bool = True,
    user: str = "",
    indexed: bool = True,
    priority: int | None = None,
    **labels: str,
) -> dict[str, Any]:
    """A Job as a pipeline writes it, with the queue label (the manifest of docs/kubernetes.md)."""
    annotations = {"gpuqueue.dev/user": user} if user else {}
    if priority is not None:
        annotations["gpuqueue.dev/priority"] = str(priority)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {"gpuqueue.dev/queue": team, **labels} if team else labels,
            "annotations": annotations,
        },
        "spec": {
            "suspend": suspend,
            "parallelism": workers,
            "completions": workers,
            **({"completionMode": "Indexed"} if indexed else {}),
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [{"name": "fetch", "image": "busybox"}],
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        },
                        {"name": "sidecar", "image": "busybox"},
                    ],
                },
            },
        },
    }


def as_person(kube: Kube, user: str) -> client.BatchV1Api:
    api = api_client_for(kube.plane.kubeconfig)
    api.set_default_header("Impersonate-User", user)
    return client.BatchV1Api(api)


@pytest.fixture
def cluster(kube: Kube, guarded: client.ApiClient, settings: Any) -> Iterator[Kube]:  # noqa: F811
    """Team namespaces labelled with their team, alice and carol allowed to make Jobs in their
    own, the policy in force, and gpuqueue acting as its ServiceAccount."""
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    settings.GPUQUEUE_RECLAIM_MIN_RUNTIME_SECONDS = 0
    settings.GPUQUEUE_DEFAULT_CHECKPOINT_GRACE_SECONDS = 0
    rbac = client.RbacAuthorizationV1Api(kube.api)
    for person, namespace in PEOPLE.items():
        kube.core.patch_namespace(
            namespace, {"metadata": {"labels": {"gpuqueue.dev/team": namespace}}}
        )
        role = {
            "metadata": {"name": "jobs"},
            "rules": [
                {
                    "apiGroups": ["batch"],
                    "resources": ["jobs"],
                    "verbs": ["create", "get", "list", "update", "patch", "delete"],
                }
            ],
        }
        binding = {
            "metadata": {"name": f"jobs-{person}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs"},
            "subjects": [{"kind": "User", "name": person}],
        }
        for create, body in (
            (rbac.create_namespaced_role, role),
            (rbac.create_namespaced_role_binding, binding),
        ):
            try:
                create(namespace, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
    backend = kube.backend
    backend.api_client = guarded
    backend.core = client.CoreV1Api(guarded)
    backend.batch = client.BatchV1Api(guarded)
    yield kube
    for namespace in PEOPLE.values():
        kube.core.patch_namespace(namespace, {"metadata": {"labels": {"gpuqueue.dev/team": None}}})


def state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def read(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    return kube.json(kube.batch.read_namespaced_job(name, namespace, _preload_content=False))


def pods_of(kube: Kube, name: str, namespace: str) -> list[dict[str, Any]]:
    return kube.pods(namespace, selector=f"batch.kubernetes.io/job-name={name}")


def events_of(kube: Kube, uid: str, namespace: str) -> list[str]:
    events = kube.core.list_namespaced_event(namespace, field_selector=f"involvedObject.uid={uid}")
    return [f"{e.reason}: {e.message}" for e in events.items]


def mirrored(kube: Kube, uid: str) -> Job:
    kube.sync_until(lambda: JobSource.objects.filter(uid=uid).exists())
    return JobSource.objects.select_related("job").get(uid=uid).job


def test_a_labelled_job_waits_suspended_runs_as_planned_is_preempted_resumes_and_is_deleted(
    cluster: Kube, submit: Any, world: Any
) -> None:
    kube = cluster
    # Team-a's jobs take every H100 GPU.
    blocker = submit(world.alice, workers=4, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(blocker) == JobState.RUNNING)
    # Team-b's own Job asks every H100 GPU, borrowing above its guarantee of 8.
    made = as_person(kube, "carol").create_namespaced_job(
        "team-b",
        labelled_job(
            "pretrain",
            "team-b",
            4,
            8,
            user="carol",
            indexed=False,
            priority=-10,
            **{"gpuqueue.dev/flavor": "h100"},
        ),
    )
    uid = made.metadata.uid
    job = mirrored(kube, uid)
    assert (job.team, job.user, job.workers, job.gpus_per_worker) == (
        world.team_b,
        world.carol,
        4,
        8,
    )
    assert job.flavor == world.h100 and job.priority == -10

    # Before admission: suspended, no pod, and the object tells why (annotation and event).
    run_cycle(backend=kube.backend)
    kube.sync_until(
        lambda: (
            "waiting"
            in read(kube, "pretrain", "team-b")["metadata"]
            .get("annotations", {})
            .get(STATUS_ANNOTATION, "")
        )
    )
    obj = read(kube, "pretrain", "team-b")
    assert obj["spec"]["suspend"] is True and pods_of(kube, "pretrain", "team-b") == []
    assert obj["metadata"]["annotations"][JOB_ANNOTATION] == str(job.pk)
    assert any(
        e.startswith("Queued: waiting in gpuqueue job") for e in events_of(kube, uid, "team-b")
    )
    assert state(job) == JobState.PENDING

    # The room comes: admitted, every pod on its planned node.
    cancel_job(world.alice, blocker)
    kube.sync_until(lambda: not kube.pods("team-a", selector=f"gpuqueue.dev/job-id={blocker.pk}"))

    def running() -> bool:
        run_cycle(backend=kube.backend)
        return state(job) == JobState.RUNNING

    kube.sync_until(running, timeout=60)
    pods = pods_of(kube, "pretrain", "team-b")
    assert Counter(p["spec"]["nodeName"] for p in pods) == Counter(job.placement)
    assert len(pods) == 4 and all(p["status"]["phase"] == "Running" for p in pods)

    # A job of team-b's of a higher priority preempts it: the Job is suspended (its pods go)
    # and its job requeued.
    urgent = submit(world.carol, team=world.team_b, workers=1, gpus_per_worker=8, priority=10)
    run_cycle(backend=kube.backend)
    urgent.refresh_from_db()
    assert state(job) == JobState.PREEMPTING, urgent.pending_reason
    kube.sync_until(lambda: state(job) == JobState.PENDING)
    kube.wait(lambda: read(kube, "pretrain", "team-b")["spec"]["suspend"] is True)
    kube.wait(lambda: pods_of(kube, "pretrain", "team-b") == [])
    # ... and resumes, as a second attempt, once the room is back.
    cancel_job(world.carol, urgent)
    kube.sync_until(running, timeout=60)
    assert job.attempts == 2
    assert len(pods_of(kube, "pretrain", "team-b")) == 4

    # Cancelling the job suspends and deletes the Job gpuqueue admitted.
    cancel_job(world.carol, job)
    kube.sync_until(
        lambda: (
            not kube.batch.list_namespaced_job(
                "team-b", field_selector="metadata.name=pretrain"
            ).items
        )
    )


def documented_manifest() -> dict[str, Any]:
    """The Job of docs/kubernetes.md's "Your own Jobs through the queue", as written."""
    text = DOC.read_text().split("## Your own Jobs through the queue", 1)[1]
    return yaml.safe_load(text.split("```yaml\n", 1)[1].split("```", 1)[0])


def test_the_documented_job_is_queued_and_deleting_it_cancels_its_job(
    cluster: Kube, world: Any
) -> None:
    kube = cluster
    made = as_person(kube, "alice").create_namespaced_job("team-a", documented_manifest())
    job = mirrored(kube, made.metadata.uid)
    # No gpuqueue.dev/user annotation: the team's pipeline identity owns it.
    assert job.user.username == "pipeline@team-a" and job.team == world.team_a
    assert (job.workers, job.gpus_per_worker, job.flavor.name) == (2, 8, "h100")
    assert (job.priority, job.max_runtime_seconds, job.state) == (10, 86400, JobState.PENDING)
    kube.batch.delete_namespaced_job("finetune", "team-a")
    kube.sync_until(lambda: state(job) == JobState.CANCELLED)


def test_a_labelled_job_gpuqueue_cannot_queue_is_told_why(cluster: Kube) -> None:
    kube = cluster
    made = as_person(kube, "alice").create_namespaced_job(
        "team-a", labelled_job("which-gpu", "team-a", 1, 8)
    )
    why = "not queued: several flavors serve nvidia.com/gpu (h100, l4)"

    def told() -> bool:
        annotations = read(kube, "which-gpu", "team-a")["metadata"].get("annotations") or {}
        return annotations.get(STATUS_ANNOTATION, "").startswith(why)

    kube.sync_until(told)
    assert any(
        e.startswith(f"NotQueued: {why}") for e in events_of(kube, made.metadata.uid, "team-a")
    )
    assert not JobSource.objects.filter(uid=made.metadata.uid).exists()


def test_the_policy_refuses_unlabelled_foreign_team_and_running_gpu_jobs(cluster: Kube) -> None:
    kube = cluster
    alice = as_person(kube, "alice")
    refused_by_policy(
        lambda: alice.create_namespaced_job("team-a", labelled_job("plain", "", 1, 8)),
        "label the Job gpuqueue.dev/queue with the team's name and create it suspended",
    )
    refused_by_policy(
        lambda: alice.create_namespaced_job("team-a", labelled_job("theirs", "team-b", 1, 8)),
        "names team team-b, and namespace team-a is team team-a's",
    )
    refused_by_policy(
        lambda: alice.create_namespaced_job(
            "team-a", labelled_job("eager", "team-a", 1, 8, suspend=False)
        ),
        "is created suspended",
    )
    refused_by_policy(
        lambda: alice.create_namespaced_job(
            "team-a", labelled_job("forged", "team-a", 1, 8, user="carol")
        ),
        "names who creates the Job (alice), not carol",
    )
    # A Job alice may create waits; alice may not start it herself.
    alice.create_namespaced_job("team-a", labelled_job("mine", "team-a", 1, 8, user="alice"))
    refused_by_policy(
        lambda: alice.patch_namespaced_job("mine", "team-a", {"spec": {"suspend": False}}),
        "only gpuqueue changes its spec",
    )
