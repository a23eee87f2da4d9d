"""A gang of pods of different asks (a PyTorchJob's 1-GPU master beside 8-GPU workers, a Ray
head with a GPU): admitted whole, each pod holding and charged its own GPUs, never in part."""

from __future__ import annotations

from dataclasses import replace

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.model import PendingJob, Snapshot
from tests.scheduler.builders import CPU, NOW, nodes, pending, running, team
from tests.scheduler.builders import node as one_node


def gang(id: int, team_id: str, *asks: tuple[int, int, int], **fields: object) -> PendingJob:
    """pending(...) with `asks` as its pods: workers and the per-worker asks its largest."""
    base = pending(
        id,
        team_id,
        workers=len(asks),
        gpus=max(a[0] for a in asks),
        cpu=max(a[1] for a in asks),
        memory=max(a[2] for a in asks),
    )
    return replace(base, pods=tuple(asks), **fields)  # type: ignore[arg-type]


HEAD = (1, 4 * CPU, 0)
WORKER = (8, 32 * CPU, 0)


def test_a_gang_of_two_8_gpu_workers_and_a_1_gpu_head_counts_17_gpus_against_its_limit() -> None:
    job = gang(1, "a", WORKER, WORKER, HEAD)
    assert job.gpus == 17
    snapshot = Snapshot(NOW, nodes(3, h100=8), (team("a", limit=17),), (), (job,))
    result = plan(snapshot)
    (admission,) = result.admissions
    # The workers on two nodes, the head beside them on the third: every pod has its node.
    assert admission.pods[:2] != admission.pods[2:] and len(set(admission.pods)) == 3
    assert sorted(admission.pods) == ["n1", "n2", "n3"]
    # One GPU short of the limit, it waits.
    over = replace(snapshot, teams=(team("a", limit=16),))
    assert not plan(over).admissions
    assert plan(over).pending[0].reason.code.value == "over_limit"


def test_the_head_fills_a_busy_node_and_leaves_empty_nodes_whole() -> None:
    # n3 has 2 GPUs free: the 1-GPU head goes there, not into an 8-GPU slot of an empty node,
    # and a later 8-GPU job of another team still finds n4 empty in the same plan.
    cluster = nodes(4, h100=8)
    busy = running(50, "b", {"n3": 6})
    jobs = (gang(1, "a", WORKER, WORKER, HEAD), pending(2, "b", gpus=8))
    result = plan(Snapshot(NOW, cluster, (team("a"), team("b")), (busy,), jobs))
    admitted = {a.job_id: a for a in result.admissions}
    assert set(admitted) == {1, 2}
    assert admitted[1].pods[2] == "n3"
    assert {admitted[1].pods[0], admitted[1].pods[1]} | {admitted[2].placement[0][0]} == {
        "n1",
        "n2",
        "n4",
    }


def test_a_gang_is_never_placed_in_part() -> None:
    # 16 GPUs free on two empty nodes and none elsewhere: the 17-GPU gang waits whole.
    cluster = nodes(3, h100=8)
    full = running(50, "b", {"n3": 8}, preemptible=False)
    job = gang(1, "a", WORKER, WORKER, HEAD)
    result = plan(Snapshot(NOW, cluster, (team("a"), team("b")), (full,), (job,)))
    assert not result.admissions
    assert result.pending[0].reason.code.value == "no_capacity"


def test_each_pod_needs_its_own_cpu_on_its_node() -> None:
    # n2 has GPUs for the head but too little CPU for it: the head goes to n3.
    cluster = (
        one_node("n1", h100=8, cpu=64 * CPU),
        one_node("n2", h100=8, cpu=64 * CPU, external_cpu=62 * CPU, external=4),
        one_node("n3", h100=8, cpu=64 * CPU),
    )
    job = gang(1, "a", WORKER, HEAD)
    (admission,) = plan(Snapshot(NOW, cluster, (team("a"),), (), (job,))).admissions
    assert admission.pods[1] != "n2"
    # Its worker and its head fit one node's GPUs (9 > 8 do not) and CPU: two nodes.
    assert len(set(admission.pods)) == 2


def test_a_later_plan_sees_each_pod_holding_only_its_own_gpus() -> None:
    # Admitted, the gang runs as 17 GPUs counted one by one (how the service stores it), its
    # rooms given per node: the head's node keeps 7 GPUs for others.
    gang_running = replace(
        running(1, "a", {"n1": 8, "n2": 8, "n3": 1}, gpus=1),
        rooms=(("n1", 32 * CPU, 0, 1), ("n2", 32 * CPU, 0, 1), ("n3", 4 * CPU, 0, 1)),
    )
    later = pending(2, "b", gpus=7)
    result = plan(
        Snapshot(NOW, nodes(3, h100=8), (team("a"), team("b")), (gang_running,), (later,))
    )
    (admission,) = result.admissions
    assert admission.placement == (("n3", 1),)


def test_a_gang_that_fits_only_with_its_small_pod_on_a_small_node_is_not_refused() -> None:
    # Nodes of 8, 8, 8 and 4 GPUs: three 8-GPU workers and a 1-GPU head fit (the head on the
    # 4-GPU node), though four slots of 8 do not. It is admitted, not called never-fitting.
    cluster = (*nodes(3, h100=8), one_node("small", h100=4))
    job = gang(1, "a", WORKER, WORKER, WORKER, HEAD)
    result = plan(Snapshot(NOW, cluster, (team("a"),), (), (job,)))
    (admission,) = result.admissions
    assert admission.pods[3] == "small"
    # One more worker than three nodes of 8 hold: never, and said so.
    too_big = gang(2, "a", WORKER, WORKER, WORKER, WORKER, HEAD)
    (waiting,) = plan(Snapshot(NOW, cluster, (team("a"),), (), (too_big,))).pending
    assert waiting.reason.code.value == "never_fits"
