"""On a real control plane: a GPU shared by time-slicing runs four quarter-GPU jobs at once and
a fifth waits; a whole GPU of a shared flavor asks every slice of it; a job bound to a GPU
model lands on a node of that model and its pods ask the kube-scheduler for it too."""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

import pytest

from gpuqueue.cluster.manifests import token_secret_name
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Flavor, Job, Node, Quota
from gpuqueue.services.cluster.inventory import flavor_capacity
from tests.kube.conftest import H100, L4, SHARED, Kube, acknowledge

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
A100 = SHARED["nvidia.com/gpu.product"]
L4_MODEL = L4["nvidia.com/gpu.product"]
H100_MODEL = H100["nvidia.com/gpu.product"]


@pytest.fixture
def shared(kube: Kube, world: Any) -> Flavor:
    """a100-shared: the shared node's 4 replicas of its one GPU, 4 slices per GPU."""
    flavor = Flavor.objects.create(
        name="a100-shared",
        resource_name="nvidia.com/gpu.shared",
        node_selector={"nvidia.com/gpu.sharing-strategy": "time-slicing"},
        shareable=True,
        slices_per_gpu=4,
    )
    Quota.objects.create(team=world.team_a, flavor=flavor, guarantee=1, limit=1)
    kube.sync_until(lambda: True)
    return flavor


def bound(kube: Kube, job: Job) -> Counter[str]:
    selector = f"gpuqueue.dev/job-id={job.pk},gpuqueue.dev/attempt={job.attempts}"
    return Counter(
        p["spec"]["nodeName"]
        for p in kube.pods(job.team.namespace, selector=selector)
        if p["spec"].get("nodeName")
    )


def pods_of(kube: Kube, job: Job) -> list[dict[str, Any]]:
    return kube.pods(job.team.namespace, selector=f"gpuqueue.dev/job-id={job.pk}")


def running(*jobs: Job) -> bool:
    return all(Job.objects.get(pk=j.pk).state == JobState.RUNNING for j in jobs)


def test_the_shared_node_reads_as_one_gpu_of_four_slices(kube: Kube, shared: Flavor) -> None:
    node = Node.objects.get(name="a100-shared-0")
    assert (node.capacity, node.gpu_model) == ({"nvidia.com/gpu.shared": 4}, A100)
    assert flavor_capacity(shared) == 1


def test_four_quarter_gpu_jobs_run_together_on_one_shared_gpu_and_a_fifth_waits(
    kube: Kube, submit: Any, shared: Flavor
) -> None:
    jobs = [submit(flavor=shared, gpu_milli=250, annotations=LONG) for _ in range(5)]
    run_cycle(backend=kube.backend)
    for job in jobs:
        job.refresh_from_db()
    first, fifth = jobs[:4], jobs[4]
    assert [j.state for j in first] == [JobState.ADMITTED] * 4
    assert all(j.gpu_devices == [["a100-shared-0", 0]] for j in first)
    assert fifth.state == JobState.PENDING
    kube.sync_until(lambda: running(*first), timeout=60)
    for job in first:
        assert bound(kube, job) == Counter({"a100-shared-0": 1})
        [pod] = pods_of(kube, job)
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu.shared"] == "1"  # one slice of four
    run_cycle(backend=kube.backend)
    assert Job.objects.get(pk=fifth.pk).state == JobState.PENDING


def test_a_whole_gpu_of_a_shared_flavor_asks_every_slice_of_it(
    kube: Kube, submit: Any, shared: Flavor
) -> None:
    """Its pod asks the 4 slices, so the kube-scheduler has none left for anyone else."""
    whole = submit(flavor=shared, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [whole.pk]
    kube.sync_until(lambda: running(whole), timeout=60)
    whole.refresh_from_db()
    [pod] = pods_of(kube, whole)
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.shared"] == "4"
    assert bound(kube, whole) == Counter({"a100-shared-0": 1})
    quarter = submit(flavor=shared, gpu_milli=250, annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == []
    assert Job.objects.get(pk=quarter.pk).state == JobState.PENDING


def test_a_job_bound_to_a_gpu_model_lands_on_a_node_of_it_and_asks_the_scheduler_too(
    kube: Kube, submit: Any, world: Any
) -> None:
    """`any-gpu` selects every untainted node with nvidia.com/gpu; bound to the H100, a worker
    of 2 GPUs runs on an H100 node (best fit alone would take an L4 node, the fuller one)."""
    anywhere = Flavor.objects.create(name="any-gpu", resource_name="nvidia.com/gpu")
    Quota.objects.create(team=world.team_a, flavor=anywhere, guarantee=4, limit=8)
    kube.sync_until(lambda: True)
    assert set(Node.objects.filter(name__startswith="l4-").values_list("gpu_model", flat=True)) == {
        L4_MODEL
    }
    job = submit(flavor=anywhere, gpus_per_worker=2, gpu_models=[H100_MODEL], annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]
    job.refresh_from_db()
    [node] = job.placement
    assert node.startswith("h100-") and node != "h100-spot-0"
    kube.sync_until(lambda: running(job), timeout=60)
    assert bound(kube, job) == Counter({node: 1})
    [pod] = pods_of(kube, job)
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    expressions = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": [H100_MODEL]} in (
        expressions
    )


def test_the_pods_of_a_model_bound_job_carry_the_models_and_still_bind(
    kube: Kube, submit: Any
) -> None:
    """Every h100 node is an H100: the engine's choice needs no model, and the kube-scheduler
    binds the released pods under the second lock all the same."""
    Node.objects.filter(name__startswith="h100-").update(gpu_model=H100_MODEL)
    job = submit(workers=2, gpus_per_worker=8, gpu_models=[H100_MODEL], annotations=LONG)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]
    kube.sync_until(lambda: running(job), timeout=60)
    job.refresh_from_db()
    assert sum(bound(kube, job).values()) == 2
    for pod in pods_of(kube, job):
        terms = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert len(terms) == 1  # one term: hostname and model both required
        assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": [H100_MODEL]} in (
            terms[0]["matchExpressions"]
        )


def test_a_quarter_gpu_within_its_guarantee_reclaims_the_borrowed_gpu_and_runs_on_it(
    kube: Kube, submit: Any, world: Any, shared: Flavor, settings: Any
) -> None:
    """team-b borrows the shared flavor's one GPU whole; team-a, guaranteed it, asks a quarter:
    team-b's job is asked to checkpoint, and once it is gone the quarter runs on that GPU."""
    settings.GPUQUEUE_MIN_RUNTIME_SECONDS = 0
    Quota.objects.create(team=world.team_b, flavor=shared, guarantee=0, limit=1)
    borrower = submit(world.carol, team=world.team_b, flavor=shared, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: running(borrower), timeout=60)

    quarter = submit(flavor=shared, gpu_milli=250, annotations=LONG)
    result = run_cycle(backend=kube.backend)
    assert result.preempted == [borrower.pk]
    quarter.refresh_from_db()
    assert quarter.state == JobState.PENDING
    assert quarter.pending_reason["code"] == "waiting_for_preemption"
    [pod] = pods_of(kube, borrower)
    assert "gpuqueue.dev/checkpoint-requested" in pod["metadata"]["annotations"]

    # The workload's part (kwok runs no containers): it saves and acknowledges.
    borrower.refresh_from_db()
    secret = kube.core.read_namespaced_secret(
        token_secret_name(borrower.pk, borrower.attempts), "team-b"
    )
    token = base64.b64decode(secret.data["token"]).decode()
    acknowledge(borrower.pk, token, "s3://ckpt/notebook")
    kube.sync_until(lambda: Job.objects.get(pk=borrower.pk).state == JobState.PENDING)

    def started() -> bool:
        run_cycle(backend=kube.backend)
        return running(quarter)

    kube.sync_until(started, timeout=60)
    quarter.refresh_from_db()
    assert quarter.gpu_devices == [["a100-shared-0", 0]]
    assert bound(kube, quarter) == Counter({"a100-shared-0": 1})
    # The requeued borrower, holding nothing now, did not take the GPU back.
    assert Job.objects.get(pk=borrower.pk).state == JobState.PENDING
