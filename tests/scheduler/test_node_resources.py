"""A worker fits a node only where its GPUs, its CPU, its memory and a pod slot all fit."""

from __future__ import annotations

import pytest

from gpuqueue.scheduler.model import PlacementStrategy, Policy, ReasonCode
from tests.scheduler.builders import CPU, GIB, HOUR, NOW, Case, check, node, pending, running, team

H100 = {"h100": 8}

CASES = [
    Case(
        "a node with 8 GPUs free but its CPUs taken by others is passed over for one with room",
        nodes=(
            node("n1", **H100, cpu=224 * CPU, external_cpu=208 * CPU),
            node("n2", **H100, cpu=224 * CPU),
        ),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=8, cpu=32 * CPU),),
        placements={1: {"n2": 1}},
    ),
    Case(
        "a job held only by CPU waits with a reason naming the node and its CPUs",
        nodes=(node("n1", **H100, cpu=224 * CPU, external_cpu=208 * CPU),),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=8, cpu=32 * CPU),),
        admitted=set(),
        reasons={1: ReasonCode.NO_CAPACITY},
        numbers={
            1: {
                "workers_fit": 0,
                "free": 8,
                "short": "cpu",
                "short_node": "n1",
                "short_node_gpus_free": 8,
                "short_left": 16 * CPU,
                "short_allocatable": 224 * CPU,
                "short_per_worker": 32 * CPU,
            }
        },
    ),
    Case(
        "the CPUs of gpuqueue's own running workers are not free",
        nodes=(node("n1", **H100, cpu=64 * CPU),),
        teams=(team("a"),),
        running=(running(10, "a", {"n1": 1}, gpus=1, cpu=60 * CPU),),
        pending=(pending(1, "a", gpus=1, cpu=8 * CPU),),
        admitted=set(),
        numbers={1: {"short": "cpu", "short_left": 4 * CPU, "short_node_gpus_free": 7}},
    ),
    Case(
        "a node short of memory holds no worker that asks more",
        nodes=(node("n1", **H100, memory=512 * GIB, external_memory=480 * GIB),),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=1, memory=64 * GIB),),
        admitted=set(),
        numbers={1: {"short": "memory", "short_left": 32 * GIB, "short_per_worker": 64 * GIB}},
    ),
    Case(
        "a node with no pod slot left holds no worker",
        nodes=(node("n1", **H100, pods=110, external_pods=110), node("n2", **H100, pods=110)),
        teams=(team("a"),),
        pending=(pending(1, "a", workers=2, gpus=4),),
        placements={1: {"n2": 2}},
    ),
    Case(
        "a worker asking more CPUs than any node has never fits, and the reason says so",
        nodes=(node("n1", **H100, cpu=224 * CPU), node("n2", **H100, cpu=192 * CPU)),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=8, cpu=300 * CPU),),
        reasons={1: ReasonCode.NEVER_FITS},
        numbers={1: {"short": "cpu", "short_per_worker": 300 * CPU, "short_largest": 224 * CPU}},
    ),
    Case(
        "a gang whose workers' CPUs fit only one to a node is placed across nodes",
        nodes=(node("n1", **H100, cpu=224 * CPU), node("n2", **H100, cpu=224 * CPU)),
        teams=(team("a"),),
        pending=(pending(1, "a", workers=2, gpus=4, cpu=150 * CPU),),
        placements={1: {"n1": 1, "n2": 1}},
    ),
    Case(
        "a gang whose workers' CPUs no two nodes hold together never fits",
        nodes=(node("n1", **H100, cpu=224 * CPU), node("n2", **H100, cpu=224 * CPU)),
        teams=(team("a"),),
        pending=(pending(1, "a", workers=3, gpus=2, cpu=150 * CPU),),
        reasons={1: ReasonCode.NEVER_FITS},
        numbers={1: {"most_workers": 2, "short": "cpu", "short_per_worker": 150 * CPU}},
    ),
    Case(
        "a worker that fits a node's CPUs only once other pods leave waits, not never fits",
        nodes=(node("n1", **H100, cpu=224 * CPU, external_cpu=200 * CPU),),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=8, cpu=200 * CPU),),
        reasons={1: ReasonCode.NO_CAPACITY},
    ),
    Case(
        "a team reclaiming its guarantee gets the CPUs of the borrower it preempts",
        nodes=(node("n1", **H100, cpu=64 * CPU),),
        teams=(team("a", guarantee=8), team("b")),
        running=(running(10, "b", {"n1": 1}, gpus=8, cpu=60 * CPU),),
        pending=(pending(1, "a", gpus=8, cpu=60 * CPU),),
        preempted={10: "reclaim"},
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
    ),
    Case(
        "reclaim passes over a borrower on a node whose CPUs others keep, for one where it helps",
        nodes=(
            node("n1", **H100, cpu=224 * CPU, external_cpu=208 * CPU),
            node("n2", **H100, cpu=224 * CPU),
        ),
        teams=(team("a", guarantee=8), team("b")),
        running=(
            running(10, "b", {"n1": 1}, gpus=8, cpu=4 * CPU),
            running(11, "b", {"n2": 1}, gpus=8, cpu=100 * CPU, priority=1),
        ),
        pending=(pending(1, "a", gpus=8, cpu=64 * CPU),),
        preempted={11: "reclaim"},
        reasons={1: ReasonCode.WAITING_FOR_PREEMPTION},
    ),
    Case(
        "a higher-priority gang preempts a worker for its pod slot when GPUs are free already",
        nodes=(node("n1", h100=6, pods=3),),
        teams=(team("a", guarantee=6),),
        running=(
            running(10, "a", {"n1": 1}, preemptible=False),
            running(11, "a", {"n1": 1}),
        ),
        pending=(pending(1, "a", workers=2, gpus=2, priority=1),),
        preempted={11: "priority"},
    ),
    Case(
        "the first job takes the CPUs a second job of the same GPUs would need",
        nodes=(node("n1", **H100, cpu=64 * CPU),),
        teams=(team("a"),),
        pending=(pending(1, "a", gpus=1, cpu=40 * CPU), pending(2, "a", gpus=1, cpu=40 * CPU)),
        admitted={1},
        numbers={2: {"short": "cpu", "short_left": 24 * CPU}},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_node_resources(case: Case) -> None:
    check(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_node_resources_when_spreading(case: Case) -> None:
    # Spread visits nodes in another order; the same room decides.
    spread = Policy(placement=PlacementStrategy.SPREAD)
    check(
        Case(
            case.name,
            case.nodes,
            case.teams,
            case.running,
            case.pending,
            policy=spread,
            admitted=case.admitted if case.placements is None else set(case.placements),
            reasons=case.reasons,
            numbers=case.numbers,
            preempted=case.preempted,
        )
    )


def test_a_starving_gang_reserves_the_node_whose_cpus_others_leave_it() -> None:
    # n1's GPUs come free first, but others' pods keep all but 16 of its CPUs: the starving
    # gang waits for n2 instead of holding n1 for ever.
    result = check(
        Case(
            "a starving gang reserves the node whose CPUs others leave it",
            nodes=(
                node("n1", **H100, cpu=224 * CPU, external_cpu=208 * CPU),
                node("n2", **H100, cpu=224 * CPU),
            ),
            teams=(team("a"), team("b", guarantee=16)),
            running=(
                running(10, "b", {"n1": 1}, gpus=8, preemptible=False, expected_runtime=2 * HOUR),
                running(11, "b", {"n2": 1}, gpus=8, preemptible=False, expected_runtime=3 * HOUR),
            ),
            pending=(pending(1, "a", gpus=8, cpu=32 * CPU, submitted=NOW - 2 * HOUR),),
            admitted=set(),
        )
    )
    (reservation,) = result.reservations
    assert reservation.placement == (("n2", 1),)
