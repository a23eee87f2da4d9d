"""On a real control plane: a node whose GPUs are free but whose CPUs others' pods request is
never planned; the gang goes where all of its requests fit, or waits saying which node is short
of CPUs, and no start fails."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuqueue.core.reason_text import describe_reason
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, Node
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


def cpu_pod(kube: Kube, name: str, node: str, cpus: int) -> None:
    """A pod gpuqueue did not create, without GPUs, requesting `cpus` CPUs on `node`."""
    body = {
        "metadata": {"name": name, "namespace": "others"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": str(cpus)}}}
            ],
        },
    }
    kube.core.create_namespaced_pod("others", body)


def others_bound(kube: Kube) -> bool:
    return all(p["spec"].get("nodeName") for p in kube.pods("others", selector=""))


def bound(kube: Kube, job: Job) -> Counter[str]:
    selector = f"gpuqueue.dev/job-id={job.pk},gpuqueue.dev/attempt={job.attempts}"
    return Counter(
        p["spec"]["nodeName"]
        for p in kube.pods(job.team.namespace, selector=selector)
        if p["spec"].get("nodeName")
    )


def test_a_node_with_gpus_free_but_its_cpus_taken_is_passed_over_and_the_gang_runs_elsewhere(
    kube: Kube, submit: Any
) -> None:
    # h100-0 and h100-1 have 8 GPUs free; others request 120 of h100-0's 128 CPUs.
    for i, node in enumerate(["h100-2", "h100-3"]):
        kube.external_pod(f"other-{i}", node, 8)
    cpu_pod(kube, "busy-0", "h100-0", 120)
    kube.wait(lambda: others_bound(kube))
    kube.sync_until(lambda: Node.objects.get(name="h100-0").external_cpu_millicores >= 120_000)

    job = submit(workers=1, gpus_per_worker=8, cpu_millicores=64_000, annotations=LONG)
    result = run_cycle(backend=kube.backend)
    assert result.admitted == [job.pk]
    job.refresh_from_db()
    assert job.placement == {"h100-1": 1}

    def running() -> bool:
        job.refresh_from_db()
        return job.state == JobState.RUNNING

    kube.sync_until(running, timeout=60)
    assert bound(kube, job) == Counter({"h100-1": 1})
    assert job.start_failures == 0


def test_with_only_a_cpu_short_node_the_gang_waits_naming_its_cpus_and_no_start_fails(
    kube: Kube, submit: Any
) -> None:
    for i, node in enumerate(["h100-1", "h100-2", "h100-3"]):
        kube.external_pod(f"other-{i}", node, 8)
    cpu_pod(kube, "busy-0", "h100-0", 120)
    kube.wait(lambda: others_bound(kube))
    kube.sync_until(lambda: Node.objects.get(name="h100-0").external_cpu_millicores >= 120_000)

    job = submit(workers=1, gpus_per_worker=8, cpu_millicores=64_000, annotations=LONG)
    for _ in range(2):
        result = run_cycle(backend=kube.backend)
        kube.sync_until(lambda: True)
        assert result.admitted == []
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.start_failures == 0
    assert kube.jobs("team-a") == [] and kube.pods("team-a") == []
    assert "Node h100-0: 8 GPUs free but 8 of 128 CPUs (a worker asks 64)." in describe_reason(
        job.pending_reason
    )

    # Once the other pod leaves, the same gang starts there.
    kube.core.delete_namespaced_pod("busy-0", "others", grace_period_seconds=0)
    kube.sync_until(lambda: Node.objects.get(name="h100-0").external_cpu_millicores == 0)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]
    job.refresh_from_db()
    assert job.placement == {"h100-0": 1}


def test_a_worker_asking_more_cpus_than_any_node_has_never_fits(kube: Kube, submit: Any) -> None:
    job = submit(workers=1, gpus_per_worker=1, cpu_millicores=200_000, annotations=LONG)
    run_cycle(backend=kube.backend)
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.pending_reason["code"] == "never_fits"
    assert describe_reason(job.pending_reason) == (
        "Can never start: a worker asks 200 CPUs and the largest h100 node has 128."
    )
