"""On a real control plane: kwok nodes labelled by rack and NVLink domain
(nvidia.com/gpu.clique), a flavor with those levels. A gang that requires one rack is bound in
one rack, where placing by node alone would split it; one that only prefers a rack takes two
racks only when no rack holds it; one that requires an NVLink domain lands inside it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, Node, Quota
from tests.kube.conftest import Kube

LONG = {"gpuqueue.dev/sim-duration-seconds": "3600"}
RACK = "example.com/rack"
CLIQUE = "nvidia.com/gpu.clique"
HOST = "kubernetes.io/hostname"
# h100-0 and h100-1 in rack r1, h100-2 and h100-3 in rack r2; NVLink domains: h100-0 and h100-1
# share one, h100-2 and h100-3 have one each.
LABELS = {
    "h100-0": {RACK: "r1", CLIQUE: "c1.0"},
    "h100-1": {RACK: "r1", CLIQUE: "c1.0"},
    "h100-2": {RACK: "r2", CLIQUE: "c2.0"},
    "h100-3": {RACK: "r2", CLIQUE: "c2.1"},
}
RACK_OF = {node: labels[RACK] for node, labels in LABELS.items()}


@pytest.fixture
def racks(kube: Kube, world: Any) -> Iterator[None]:
    for node, labels in LABELS.items():
        kube.core.patch_node(node, {"metadata": {"labels": labels}})
    world.h100.topology_levels = [RACK, CLIQUE, HOST]
    world.h100.save()
    Quota.objects.filter(flavor=world.h100).update(guarantee=16, limit=40)
    kube.sync_until(
        lambda: all(Node.objects.get(name=n).labels.get(RACK) == v for n, v in RACK_OF.items())
    )
    yield
    for node in LABELS:
        kube.core.patch_node(node, {"metadata": {"labels": {RACK: None, CLIQUE: None}}})


def bound(kube: Kube, job: Job) -> Counter[str]:
    """{node: workers} of the job's pods, as kube-scheduler bound them, once all are bound."""
    selector = f"gpuqueue.dev/job-id={job.pk}"

    def nodes() -> Counter[str]:
        return Counter(
            p["spec"]["nodeName"]
            for p in kube.pods(job.team.namespace, selector=selector)
            if p["spec"].get("nodeName")
        )

    kube.sync_until(lambda: sum(nodes().values()) == job.workers, timeout=60)
    return nodes()


def gang(submit: Any, workers: int, level: str, required: bool) -> Job:
    job = submit(workers=workers, gpus_per_worker=8, annotations=LONG)
    Job.objects.filter(pk=job.pk).update(topology_level=level, topology_required=required)
    job.refresh_from_db()
    return job


@pytest.mark.parametrize("required", [True, False], ids=["required", "preferred"])
def test_a_rack_gang_is_bound_in_one_rack_where_node_by_node_would_split_it(
    kube: Kube, submit: Any, racks: None, required: bool
) -> None:
    """Another pod takes 4 GPUs of h100-0: the nodes with 8 free are h100-1 (r1), h100-2 and
    h100-3 (r2). Bin-packing by node alone takes h100-1 and h100-2, two racks; requiring a
    rack, or only preferring one, the gang goes to r2 whole."""
    kube.external_pod("other-0", "h100-0", 4)
    kube.wait(lambda: all(p["spec"].get("nodeName") for p in kube.pods("others", selector="")))
    kube.sync_until(lambda: True)
    job = gang(submit, 2, RACK, required=required)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]
    job.refresh_from_db()
    assert job.placement_domain == f"{RACK}=r2"
    assert bound(kube, job) == Counter({"h100-2": 1, "h100-3": 1})


def test_a_preferred_rack_gang_takes_two_racks_when_no_rack_holds_it(
    kube: Kube, submit: Any, racks: None
) -> None:
    """Each rack has two nodes: a gang of 3 x 8 preferring a rack starts at once on two racks
    (a required one would wait for ever)."""
    job = gang(submit, 3, RACK, required=False)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]
    job.refresh_from_db()
    placed = bound(kube, job)
    assert {RACK_OF[n] for n in placed} == {"r1", "r2"} and sum(placed.values()) == 3
    assert job.placement_domain == ""


def test_a_gang_requiring_an_nvlink_domain_lands_inside_it(
    kube: Kube, submit: Any, racks: None
) -> None:
    """Only h100-0 and h100-1 share an NVLink domain (c1.0): a gang of 2 x 8 requiring one
    goes there, though r2's two nodes are as empty."""
    job = gang(submit, 2, CLIQUE, required=True)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]
    job.refresh_from_db()
    assert job.placement_domain == f"{CLIQUE}=c1.0"
    assert bound(kube, job) == Counter({"h100-0": 1, "h100-1": 1})
