"""On a real control plane: a gang is created only when it fits whole, and its pods are bound
exactly where the plan put them, with the planned number of workers per node."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuqueue.core.reason_text import describe_reason
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Flavor, Job, Quota
from tests.kube.conftest import SPOT, SPOT_TAINT, Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}


def bound(kube: Kube, job: Job) -> Counter[str]:
    """{node: workers} of the job's current attempt, as kube-scheduler bound them."""
    selector = f"gpuqueue.dev/job-id={job.pk},gpuqueue.dev/attempt={job.attempts}"
    return Counter(
        p["spec"]["nodeName"]
        for p in kube.pods(job.team.namespace, selector=selector)
        if p["spec"].get("nodeName")
    )


def test_a_gang_of_4_by_2_with_6_gpus_free_creates_no_job_and_says_3_of_4_fit(
    kube: Kube, submit: Any
) -> None:
    for i, node in enumerate(["h100-0", "h100-1", "h100-2"]):
        kube.external_pod(f"other-{i}", node, 8)
    kube.external_pod("other-3", "h100-3", 2)
    kube.external_pod("other-4", "h100-spot-0", 8)
    kube.wait(lambda: all(p["spec"].get("nodeName") for p in kube.pods("others", selector="")))
    kube.sync_until(lambda: True)

    job = submit(workers=4, gpus_per_worker=2, annotations=LONG)
    result = run_cycle(backend=kube.backend)
    kube.sync_until(lambda: True)

    job.refresh_from_db()
    assert result.admitted == [] and job.state == JobState.PENDING
    assert kube.jobs("team-a") == [] and kube.pods("team-a") == []
    assert "3 of 4 workers fit now" in describe_reason(job.pending_reason)


def test_twenty_gangs_admitted_in_one_cycle_are_bound_exactly_as_planned_beside_other_pods(
    kube: Kube, submit: Any, world: Any
) -> None:
    """Mixed shapes, while pods gpuqueue did not create take GPUs on the same nodes: every
    worker runs on its planned node, with the planned count per node, and no gang is ever
    half-bound across a sync."""
    Quota.objects.filter(flavor=world.h100).update(guarantee=16, limit=40)
    Quota.objects.filter(flavor=world.l4).update(guarantee=4, limit=8)
    kube.external_pod("other-0", "h100-0", 1)
    kube.external_pod("other-1", "l4-1", 1)
    kube.wait(lambda: all(p["spec"].get("nodeName") for p in kube.pods("others", selector="")))
    kube.sync_until(lambda: True)
    # (workers, GPUs per worker): 30 of the 31 H100 and 6 of the 7 L4 GPUs left free.
    h100 = [(1, 1)] * 7 + [(2, 1)] * 4 + [(1, 2)] * 2 + [(2, 2)] * 2 + [(3, 1)]
    l4 = [(1, 2), (2, 1), (1, 1), (1, 1)]
    jobs = []
    shapes = [(world.h100, shape) for shape in h100] + [(world.l4, shape) for shape in l4]
    for n, (flavor, (workers, gpus)) in enumerate(shapes):
        team, user = (world.team_a, world.alice) if n % 2 else (world.team_b, world.carol)
        jobs.append(
            submit(
                user,
                team=team,
                flavor=flavor,
                workers=workers,
                gpus_per_worker=gpus,
                annotations=LONG,
            )
        )
    result = run_cycle(backend=kube.backend)
    assert sorted(result.admitted) == sorted(j.pk for j in jobs)
    # Others keep creating GPU pods on the same nodes while the gangs are released.
    kube.external_pod("other-2", "h100-1", 1)
    kube.external_pod("other-3", "h100-2", 1)

    def settled() -> bool:
        for job in jobs:
            job.refresh_from_db()
            placed = bound(kube, job)
            # All or nothing at every sync: a gang is never seen half-bound.
            assert sum(placed.values()) in (0, job.workers), (job.pk, placed)
        return all(
            j.state == JobState.RUNNING or (j.state == JobState.PENDING and j.start_failures)
            for j in jobs
        )

    kube.sync_until(settled, timeout=60)
    running = [j for j in jobs if j.state == JobState.RUNNING]
    held = [j for j in jobs if j.state == JobState.PENDING]
    assert len(running) >= 18  # the late pods can take the room of at most two gangs
    for job in running:
        assert bound(kube, job) == Counter(job.placement), job.pk
    for job in held:  # whole, never started, requeued to be planned again
        assert job.not_before is not None and "planned node" in job.events.last().reason
    kube.wait(
        lambda: all(
            not kube.pods(j.team.namespace, selector=f"gpuqueue.dev/job-id={j.pk}") for j in held
        )
    )


def test_a_tainted_node_is_used_only_by_a_flavor_that_tolerates_it(
    kube: Kube, submit: Any, world: Any
) -> None:
    spot = Flavor.objects.create(
        name="h100-spot",
        resource_name="nvidia.com/gpu",
        node_selector=SPOT,
        tolerations=[{"key": SPOT_TAINT["key"], "operator": "Exists"}],
    )
    Quota.objects.create(team=world.team_a, flavor=spot, guarantee=0, limit=40, weight=1)
    Quota.objects.filter(flavor=world.h100).update(limit=40)
    kube.sync_until(lambda: True)
    plain = [submit(workers=1, gpus_per_worker=8, annotations=LONG) for _ in range(5)]
    run_cycle(backend=kube.backend)
    for job in plain:
        job.refresh_from_db()
    admitted = [j for j in plain if j.state == JobState.ADMITTED]
    assert len(admitted) == 4  # the four untainted nodes; the fifth waits
    assert all("h100-spot-0" not in j.placement for j in admitted)

    tolerant = submit(flavor=spot, workers=1, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    tolerant.refresh_from_db()
    # The plain flavor's labels match the spot node too: only its taint keeps the fifth out.
    assert tolerant.state == JobState.ADMITTED and tolerant.placement == {"h100-spot-0": 1}
    assert Job.objects.filter(pk__in=[j.pk for j in plain], state=JobState.PENDING).count() == 1

    kube.sync_until(lambda: tolerant.__class__.objects.get(pk=tolerant.pk).state == "RUNNING")
    assert bound(kube, tolerant) == Counter({"h100-spot-0": 1})


def test_a_worker_gets_the_flavor_s_cpu_and_memory_and_is_no_longer_best_effort(
    kube: Kube, submit: Any, world: Any
) -> None:
    Flavor.objects.filter(pk=world.h100.pk).update(
        cpu_millicores_per_gpu=12000, memory_mib_per_gpu=98304
    )
    job = submit(workers=1, gpus_per_worker=2, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING)
    (pod,) = kube.pods("team-a", selector=f"gpuqueue.dev/job-id={job.pk}")
    # The API server's own verdict: Burstable, not the BestEffort evicted first.
    assert pod["status"]["qosClass"] == "Burstable"
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    assert requests["cpu"] == "24" and requests["memory"] == "192Gi"
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert not any(
        m["mountPath"].startswith("/var/run/secrets/kubernetes.io")
        for m in pod["spec"]["containers"][0]["volumeMounts"]
    )
