"""On a real control plane: what a job may use on its node and in its namespace. Devices come
from the device plugin alone (a job's env and its Secrets cannot choose them), a member uses only
the ServiceAccounts, Secrets and claims the team's admins allow, and a root image runs where the
namespace's Pod Security level admits it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from rest_framework.test import APIClient

from gpuqueue.cluster.manifests import workload_name
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Flavor, Job, JobEvent
from teams.models import Team
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
BODY = {
    "team": "team-a",
    "flavor": "h100",
    "image": "ghcr.io/acme/train:1",
    "annotations": LONG,
}


def _api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _written() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


def _container(kube: Kube, namespace: str, job_id: int) -> dict[str, Any]:
    (pod, *_) = kube.pods(namespace, selector=f"gpuqueue.dev/job-id={job_id}")
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


@contextlib.contextmanager
def _created(delete: Any) -> Iterator[None]:
    """Objects a test makes in a team namespace that `Kube.reset` would not remove."""
    try:
        yield
    finally:
        with contextlib.suppress(ApiException):
            delete()


def test_a_job_that_sets_nvidia_visible_devices_is_refused_and_nothing_is_written(
    kube: Kube, world: Any
) -> None:
    body = {**BODY, "env": {"NVIDIA_VISIBLE_DEVICES": "all"}}
    response = _api(world.alice).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400, response.content
    assert "NVIDIA_VISIBLE_DEVICES" in response.json()["error"]["fields"]["env"][0]
    assert _written() == (0, 0)
    run_cycle(backend=kube.backend)
    assert kube.jobs("team-a") == []


def test_a_secret_that_carries_nvidia_visible_devices_does_not_choose_the_devices(
    kube: Kube, world: Any
) -> None:
    """The Secret is the team's, allowed, and sets NVIDIA_VISIBLE_DEVICES=all (as an NGC
    credentials Secret copied from a workstation might). Kubernetes applies `envFrom` first and
    `env` over it: the pod the API server stored pins the variable in `env`."""
    secret = {"metadata": {"name": "ngc"}, "stringData": {"NVIDIA_VISIBLE_DEVICES": "all"}}
    kube.core.create_namespaced_secret("team-a", secret)
    with _created(lambda: kube.core.delete_namespaced_secret("ngc", "team-a")):
        Team.objects.filter(pk=world.team_a.pk).update(allowed_secrets=["ngc"])
        response = _api(world.alice).post(
            "/api/v1/jobs/", {**BODY, "env_from_secrets": ["ngc"]}, format="json"
        )
        assert response.status_code == 201, response.content
        job_id = response.json()["id"]
        run_cycle(backend=kube.backend)
        kube.wait(lambda: bool(kube.pods("team-a", selector=f"gpuqueue.dev/job-id={job_id}")))
        container = _container(kube, "team-a", job_id)
        assert container["envFrom"] == [{"secretRef": {"name": "ngc"}}]
        pinned = [e for e in container["env"] if e["name"] == "NVIDIA_VISIBLE_DEVICES"]
        assert pinned == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"service_account": "builder"}, "service_account"),
        ({"env_from_secrets": ["db-root"]}, "env_from_secrets"),
        ({"volumes": [{"claim": "finance", "mount_path": "/data"}]}, "volumes"),
    ],
    ids=["a ServiceAccount", "a Secret", "a claim"],
)
def test_what_the_team_does_not_allow_is_refused_though_the_namespace_has_it(
    change: dict[str, Any], field: str, kube: Kube, world: Any
) -> None:
    """The namespace holds a ServiceAccount, a Secret and a claim that the team's admins did not
    list (the team lists others): a member cannot use them through gpuqueue."""
    objects = [
        (
            lambda: kube.core.create_namespaced_service_account(
                "team-a", {"metadata": {"name": "builder"}}
            ),
            lambda: kube.core.delete_namespaced_service_account("builder", "team-a"),
        ),
        (
            lambda: kube.core.create_namespaced_secret(
                "team-a", {"metadata": {"name": "db-root"}, "stringData": {"PASSWORD": "x"}}
            ),
            lambda: kube.core.delete_namespaced_secret("db-root", "team-a"),
        ),
        (
            lambda: kube.core.create_namespaced_persistent_volume_claim(
                "team-a",
                {
                    "metadata": {"name": "finance"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                },
            ),
            lambda: kube.core.delete_namespaced_persistent_volume_claim("finance", "team-a"),
        ),
    ]
    with contextlib.ExitStack() as stack:
        for create, delete in objects:
            create()
            stack.enter_context(_created(delete))
        Team.objects.filter(pk=world.team_a.pk).update(
            allowed_service_accounts=["trainer"],
            allowed_secrets=["wandb"],
            allowed_claims=["imagenet"],
        )
        response = _api(world.alice).post("/api/v1/jobs/", {**BODY, **change}, format="json")
        assert response.status_code == 400, response.content
        assert "not on team team-a's list" in response.json()["error"]["fields"][field][0]
        assert _written() == (0, 0)
        run_cycle(backend=kube.backend)
        assert kube.jobs("team-a") == []


def test_an_allowed_service_account_is_the_one_the_pods_run_as(kube: Kube, world: Any) -> None:
    kube.core.create_namespaced_service_account("team-a", {"metadata": {"name": "trainer"}})
    with _created(lambda: kube.core.delete_namespaced_service_account("trainer", "team-a")):
        Team.objects.filter(pk=world.team_a.pk).update(allowed_service_accounts=["train*"])
        response = _api(world.alice).post(
            "/api/v1/jobs/", {**BODY, "service_account": "trainer"}, format="json"
        )
        assert response.status_code == 201, response.content
        job_id = response.json()["id"]
        run_cycle(backend=kube.backend)
        kube.wait(lambda: bool(kube.pods("team-a", selector=f"gpuqueue.dev/job-id={job_id}")))
        (pod, *_) = kube.pods("team-a", selector=f"gpuqueue.dev/job-id={job_id}")
        assert pod["spec"]["serviceAccountName"] == "trainer"


def _state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def _enforce(kube: Kube, namespace: str, level: str | None) -> None:
    label = {"pod-security.kubernetes.io/enforce": level}
    kube.core.patch_namespace(namespace, {"metadata": {"labels": label}})


def _pod_security_refusals(kube: Kube, namespace: str, name: str) -> list[str]:
    events = kube.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    ).items
    return [
        e.message
        for e in events
        if e.reason == "FailedCreate" and "violates PodSecurity" in (e.message or "")
    ]


def test_a_root_image_runs_in_a_baseline_namespace_and_is_refused_in_a_restricted_one(
    kube: Kube, world: Any, submit: Any
) -> None:
    """The flavor's profile allows root and runs as uid 0 (an NGC image's user). team-a's
    namespace enforces Pod Security "baseline": the Job controller's pods are admitted, as
    root. team-b's enforces "restricted": the same pods are refused, and gpuqueue tells the
    job's owner why."""
    Flavor.objects.filter(pk=world.h100.pk).update(allow_root=True, run_as_user=0, fs_group=0)
    _enforce(kube, "team-a", "baseline")
    _enforce(kube, "team-b", "restricted")
    try:
        baseline = submit(world.alice, team=world.team_a, annotations=LONG)
        restricted = submit(world.carol, team=world.team_b, annotations=LONG)
        run_cycle(backend=kube.backend)
        kube.wait(lambda: bool(kube.pods("team-a", selector=f"gpuqueue.dev/job-id={baseline.pk}")))
        (pod, *_) = kube.pods("team-a", selector=f"gpuqueue.dev/job-id={baseline.pk}")
        assert pod["spec"]["securityContext"]["runAsUser"] == 0
        assert "runAsNonRoot" not in pod["spec"]["securityContext"]

        name = workload_name(restricted.pk, 1)
        kube.wait(lambda: bool(_pod_security_refusals(kube, "team-b", name)))
        (message, *_) = _pod_security_refusals(kube, "team-b", name)
        assert 'violates PodSecurity "restricted' in message and "runAsNonRoot" in message
        assert kube.pods("team-b", selector=f"gpuqueue.dev/job-id={restricted.pk}") == []
        # gpuqueue reads the refusal back: a failed start, requeued with the API's reason.
        kube.sync_until(lambda: _state(restricted) == JobState.PENDING)
        reason = restricted.events.last().reason
        assert "pods refused" in reason and "violates PodSecurity" in reason
    finally:
        _enforce(kube, "team-a", None)
        _enforce(kube, "team-b", None)
