"""On a real control plane: nodes that stop being ready, preemption with a checkpoint, pods the
API refuses, and a watcher and a gpuqueue that restart."""

from __future__ import annotations

import base64
import contextlib
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.test import Client

from gpuqueue.cluster.k8s_watch import ResourceWatch, start_watches
from gpuqueue.cluster.manifests import token_secret_name, workload_name
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from gpuqueue.services.jobs.checkpoint import job_for_token
from tests.kube.conftest import Kube, acknowledge

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def state(job: Job) -> str:
    job.refresh_from_db()
    return str(job.state)


def env_of(kube: Kube, job: Job) -> dict[str, str]:
    (k8s_job,) = [
        j
        for j in kube.jobs(job.team.namespace)
        if j["metadata"]["name"] == workload_name(job.pk, job.attempts)
    ]
    container = k8s_job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_a_node_not_ready_within_the_grace_keeps_its_gang_and_past_it_requeues_it(
    kube: Kube, submit: Any
) -> None:
    job = submit(workers=1, gpus_per_worker=4, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.RUNNING)
    (node,) = job.placement
    Job.objects.filter(pk=job.pk).update(checkpoint_location="s3://ckpt/step-7")

    # NotReady for 60 s (a kubelet restart): nothing is torn down, no new work goes there.
    kube.set_ready(node, False, rfc3339(datetime.now(UTC) - timedelta(seconds=60)))
    kube.sync_until(lambda: True)
    assert state(job) == JobState.RUNNING and kube.jobs("team-a")
    other = submit(workers=1, gpus_per_worker=4, annotations=LONG)
    run_cycle(backend=kube.backend)
    other.refresh_from_db()
    assert other.state == JobState.ADMITTED and node not in other.placement  # binpack would

    # NotReady past the grace: the gang is torn down and requeued, its checkpoint kept.
    kube.set_ready(node, False, rfc3339(datetime.now(UTC) - timedelta(seconds=301)))
    kube.sync_until(lambda: state(job) == JobState.PENDING)
    assert job.checkpoint_location == "s3://ckpt/step-7" and job.attempts == 1
    assert "has not been ready for 30" in job.events.last().reason
    kube.wait(lambda: not kube.pods("team-a", selector=f"gpuqueue.dev/job-id={job.pk}"))
    run_cycle(backend=kube.backend)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and node not in job.placement
    assert env_of(kube, job)["GPUQUEUE_CHECKPOINT"] == "s3://ckpt/step-7"


def test_a_preempted_gang_is_asked_to_checkpoint_and_resumes_even_if_its_job_completed(
    kube: Kube, submit: Any, world: Any, settings: Any, monkeypatch: Any
) -> None:
    """team-b borrows the whole H100 pool; team-a's guaranteed job reclaims a node."""
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    # Long enough that all four run at once on a loaded machine, short enough to end in time.
    short = {"gpuqueue.dev/sim-duration-seconds": "20"}
    borrowed = [
        submit(world.carol, team=world.team_b, workers=1, gpus_per_worker=8, annotations=short)
        for _ in range(4)
    ]
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: all(state(j) == JobState.RUNNING for j in borrowed))
    guaranteed = submit(workers=1, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    (victim,) = [j for j in borrowed if state(j) == JobState.PREEMPTING]

    # Every pod of the gang carries the checkpoint request.
    selector = f"gpuqueue.dev/job-id={victim.pk}"
    pods = kube.pods("team-b", selector=selector)
    assert pods and all(
        "gpuqueue.dev/checkpoint-requested" in p["metadata"]["annotations"] for p in pods
    )
    # The workload's part (kwok runs no containers): acknowledge with the attempt's token.
    secret = kube.core.read_namespaced_secret(token_secret_name(victim.pk, 1), "team-b")
    token = base64.b64decode(secret.data["token"]).decode()
    acknowledge(victim.pk, token, "s3://ckpt/victim/step-3")
    # Its Job then completes (the workload exits after saving) before gpuqueue looks again.
    name = workload_name(victim.pk, 1)
    kube.wait(
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for j in kube.jobs("team-b")
            if j["metadata"]["name"] == name
            for c in (j.get("status") or {}).get("conditions") or []
        ),
        timeout=30,
    )
    kube.sync_until(lambda: state(victim) == JobState.PENDING)
    assert victim.checkpoint_location == "s3://ckpt/victim/step-3"
    assert "checkpoint acknowledged" in victim.events.last().reason
    kube.wait(lambda: not [j for j in kube.jobs("team-b") if j["metadata"]["name"] == name])

    # Once the other borrowed jobs finish, it resumes from its checkpoint.
    def resumed() -> bool:
        run_cycle(backend=kube.backend)
        return state(victim) in (JobState.ADMITTED, JobState.RUNNING)

    kube.sync_until(resumed, timeout=60)
    env = env_of(kube, victim)
    assert env["GPUQUEUE_RESUME"] == "1" and env["GPUQUEUE_ATTEMPT"] == "2"
    assert env["GPUQUEUE_CHECKPOINT"] == "s3://ckpt/victim/step-3"
    kube.sync_until(lambda: state(guaranteed) == JobState.RUNNING)


def test_pods_refused_by_a_resource_quota_show_the_cause_back_off_and_fail_after_the_cap(
    kube: Kube, submit: Any, world: Any, settings: Any
) -> None:
    settings.GPUQUEUE_MAX_START_ATTEMPTS = 3
    settings.GPUQUEUE_START_BACKOFF_SECONDS = 1
    kube.core.create_namespaced_resource_quota(
        "team-a",
        {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "4"}}},
    )
    job = submit(workers=1, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.PENDING)
    assert job.start_failures == 1 and job.not_before is not None
    reason = job.events.last().reason
    assert "pods refused" in reason and "exceeded quota" in reason and "1 s" in reason

    backoffs = [job.not_before - job.events.last().at]

    def failed() -> bool:
        if state(job) == JobState.PENDING and job.not_before and len(backoffs) < job.start_failures:
            backoffs.append(job.not_before - job.events.last().at)
        run_cycle(backend=kube.backend)
        return state(job) == JobState.FAILED

    kube.sync_until(failed, timeout=60)
    assert job.start_failures == 3 and "exceeded quota" in job.message
    assert backoffs[1] > backoffs[0]  # exponential
    api = Client()
    api.force_login(world.alice)
    shown = api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert shown["state"] == "FAILED" and "exceeded quota" in shown["message"]
    # Nothing leaks: every attempt's Job, Service and Secret are gone.
    selector = f"gpuqueue.dev/job-id={job.pk}"
    kube.wait(
        lambda: (
            not kube.jobs("team-a")
            and not kube.core.list_namespaced_service("team-a", label_selector=selector).items
            and not kube.core.list_namespaced_secret("team-a", label_selector=selector).items
        ),
        timeout=30,
    )


def test_the_watch_survives_an_apiserver_restart_and_a_410_gone(kube: Kube) -> None:
    backend = kube.new_backend()
    changed = threading.Event()
    watches = start_watches(backend, changed, ["team-a"], watch_seconds=5)
    try:
        kube.wait(lambda: all(w.listed.is_set() for w in watches.values()))
        kube.plane.stop_apiserver()
        time.sleep(1)
        kube.plane.start_apiserver()
        kube.external_pod("after-restart", "h100-0", 1)
        kube.wait(
            lambda: any(
                p["metadata"]["name"] == "after-restart" for p in backend.store.items("pods")
            ),
            timeout=60,
        )
        # A resourceVersion too old for the server: 410 Gone, listed afresh, nothing missed.
        other = kube.new_backend()
        stale = ResourceWatch(
            other,
            "pods",
            other.core.list_pod_for_all_namespaces,
            changed=changed,
            watch_seconds=5,
        )
        stale.resource_version = "1"
        watches["stale"] = stale
        stale.start()
        kube.wait(lambda: stale.lists == 1, timeout=30)
        names = lambda: {p["metadata"]["name"] for p in other.store.items("pods")}  # noqa: E731
        assert "after-restart" in names()
        kube.core.delete_namespaced_pod("after-restart", "others", grace_period_seconds=0)
        kube.wait(lambda: "after-restart" not in names(), timeout=30)
    finally:
        for watch in watches.values():
            watch.stop()


def test_the_periodic_relist_happens_even_while_events_keep_coming(kube: Kube) -> None:
    """A resync asks each watch to list afresh; the events that arrive meanwhile must not undo
    that (they carry a resourceVersion the watch would otherwise resume from)."""
    backend = kube.new_backend()
    changed = threading.Event()
    watches = start_watches(backend, changed, ["team-a"], watch_seconds=30)
    try:
        pods = watches["pods"]
        kube.wait(lambda: pods.lists == 1)
        pods.relist()
        kube.external_pod("during-relist", "h100-0", 1)
        kube.wait(lambda: pods.lists == 2, timeout=20)
    finally:
        for watch in watches.values():
            watch.stop()


def test_a_finished_job_s_objects_and_pods_are_kept_for_their_logs_then_deleted(
    kube: Kube, submit: Any, settings: Any
) -> None:
    job = submit(
        workers=2, gpus_per_worker=1, annotations={"gpuqueue.dev/sim-duration-seconds": "1"}
    )
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.SUCCEEDED)
    selector = f"gpuqueue.dev/job-id={job.pk}"
    for _ in range(3):
        sync_cluster(kube.backend)  # passes after the job ended: its objects stay
    assert [j["metadata"]["name"] for j in kube.jobs("team-a")] == [workload_name(job.pk, 1)]
    assert len(kube.pods("team-a", selector=selector)) == 2  # their logs can be read
    settings.GPUQUEUE_K8S_KEEP_FINISHED_SECONDS = 0
    kube.sync_until(lambda: not kube.jobs("team-a"))
    kube.wait(
        lambda: (
            not kube.core.list_namespaced_secret("team-a", label_selector=selector).items
            and not kube.core.list_namespaced_service("team-a", label_selector=selector).items
        )
    )


def test_a_one_worker_job_is_a_secret_and_an_ungated_job_without_a_service(
    kube: Kube, submit: Any
) -> None:
    """A single worker has no peer to find and cannot land half-way: no headless Service and
    no placement gate (two API requests fewer per job), its rendezvous address is itself, and
    it still runs where planned and is stopped as a gang is."""
    job = submit(workers=1, gpus_per_worker=1, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(job) == JobState.RUNNING)
    selector = f"gpuqueue.dev/job-id={job.pk}"
    assert kube.core.list_namespaced_service("team-a", label_selector=selector).items == []
    assert len(kube.core.list_namespaced_secret("team-a", label_selector=selector).items) == 1
    assert env_of(kube, job)["MASTER_ADDR"] == "127.0.0.1"
    (pod,) = kube.pods("team-a", selector=selector)
    # Pinned to its planned node from the start: no gate to take off, no release PATCH.
    assert not pod["spec"].get("schedulingGates") and not pod["spec"].get("subdomain")
    job.refresh_from_db()
    (node,) = job.placement  # the test nodes' hostname labels are their names
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": node}
    assert pod["spec"]["nodeName"] == node
    kube.backend.stop(job.pk, job.attempts)
    kube.wait(
        lambda: (
            not kube.jobs("team-a")
            and not kube.core.list_namespaced_secret("team-a", label_selector=selector).items
        )
    )


def test_pods_are_listed_in_pages_and_kept_without_their_managed_fields(kube: Kube) -> None:
    for i in range(7):
        kube.external_pod(f"paged-{i}", f"h100-{i % 4}", 1)
    everything = kube.pods("others", selector="")
    assert len(everything) == 7 and all("managedFields" in p["metadata"] for p in everything)
    backend = kube.new_backend(page_size=2)
    calls: list[dict[str, Any]] = []
    list_pods = backend.core.list_pod_for_all_namespaces

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return list_pods(*args, **kwargs)

    backend.core.list_pod_for_all_namespaces = counted  # type: ignore[method-assign]
    listed = backend.list_raw_pods()
    names = {p["metadata"]["name"] for p in listed["items"]}
    assert {p["metadata"]["name"] for p in everything} <= names
    assert len(calls) >= 4 and all(c["limit"] == 2 for c in calls)  # 7 pods: 4 pages at least
    assert listed["metadata"]["resourceVersion"]
    assert not any("managedFields" in p["metadata"] for p in listed["items"])


def test_a_gpuqueue_restart_in_the_middle_of_a_launch_adopts_what_exists(
    kube: Kube, submit: Any
) -> None:
    crashing = kube.new_backend()

    def crash(*args: Any, **kwargs: Any) -> None:
        raise SystemExit("the worker died after creating the Secret and the Service")

    crashing.batch.create_namespaced_job = crash  # type: ignore[method-assign]
    job = submit(workers=2, gpus_per_worker=4, annotations=LONG)
    with contextlib.suppress(SystemExit):
        run_cycle(backend=crashing)
    assert kube.jobs("team-a") == []
    (secret,) = kube.core.list_namespaced_secret(
        "team-a", label_selector=f"gpuqueue.dev/job-id={job.pk}"
    ).items

    restarted = kube.new_backend()  # a new process: its sync finds no Job and launches again
    kube.sync_until(lambda: state(job) == JobState.RUNNING, backend=restarted)
    assert len(kube.jobs("team-a")) == 1  # adopted what existed, created the rest once
    selector = f"gpuqueue.dev/job-id={job.pk}"
    assert len(kube.core.list_namespaced_service("team-a", label_selector=selector).items) == 1
    (kept,) = kube.core.list_namespaced_secret("team-a", label_selector=selector).items
    assert kept.metadata.uid == secret.metadata.uid  # the same token, still accepted
    token = base64.b64decode(kept.data["token"]).decode()
    assert job_for_token(token) == job
    (k8s_job,) = kube.jobs("team-a")
    assert k8s_job["metadata"]["ownerReferences"][0]["uid"] == secret.metadata.uid
