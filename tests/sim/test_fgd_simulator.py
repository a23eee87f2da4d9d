"""The fill-up's reference: FGD's own rule as its simulator runs it (`fgd-sim`)."""

from __future__ import annotations

import pytest

from gpuqueue.sim.fgd_simulator import FgdSimulatorRule
from gpuqueue.sim.fillup import MIB, FgdMeasure, OpenbNode, Pod, fill_up
from tests.sim.test_fillup import tiny_fillup


def test_a_fraction_takes_the_gpu_where_fgd_fragmentation_grows_least() -> None:
    """Half-GPU pods are the workload. After a half and a 300, GPU 0 has 500 left and GPU 1
    700: 200 more on GPU 0 would strand its last 300, on GPU 1 the 500 left still serve."""
    half, small, smaller = Pod(1000, MIB, 0, 500), Pod(1000, MIB, 0, 300), Pod(1000, MIB, 0, 200)
    rule = FgdSimulatorRule(
        [OpenbNode("n1", 64000, 1 << 40, 2, "T4")], FgdMeasure([half], popularity=1.0), [0]
    )
    assert rule.place(half) == 0 and rule.left[0] == [500, 1000]
    rule.place(small)
    assert rule.left[0] == [500, 700]  # not [200, 1000]: 200 left serves no half
    rule.place(smaller)
    assert rule.left[0] == [500, 500]


def test_ties_go_to_the_seeded_node_order_not_the_name() -> None:
    nodes = [OpenbNode(f"n{i}", 64000, 1 << 40, 1, "T4") for i in (1, 2)]
    pod = Pod(1000, MIB, 0, 500)
    assert FgdSimulatorRule(nodes, FgdMeasure([pod]), [1, 0]).place(pod) == 1
    assert FgdSimulatorRule(nodes, FgdMeasure([pod]), [0, 1]).place(pod) == 0


def test_a_cpu_only_pod_goes_where_fgd_fragmentation_does_not_grow() -> None:
    """Node a comes first, but 4 CPUs taken there leave too few for the 6-CPU GPU pods: its
    GPU would strand. On b nothing changes for them."""
    gpu_pod, cpu_pod = Pod(6000, MIB, 1, 0), Pod(4000, MIB, 0, 0)
    nodes = [OpenbNode("a", 8000, 1 << 40, 1, "T4"), OpenbNode("b", 64000, 1 << 40, 1, "T4")]
    rule = FgdSimulatorRule(nodes, FgdMeasure([gpu_pod, cpu_pod]), [0, 1])
    assert rule.place(cpu_pod) == 1
    assert rule.place(gpu_pod) == 0  # a still holds one


def test_a_pod_that_fits_nowhere_is_dropped_and_memory_counts() -> None:
    rule = FgdSimulatorRule(
        [OpenbNode("n1", 64000, 8 * MIB, 1, "T4")], FgdMeasure([Pod(1000, MIB, 1, 0)]), [0]
    )
    assert rule.place(Pod(1000, 16 * MIB, 1, 0)) is None
    assert rule.place(Pod(1000, MIB, 0, 500, ("A100",))) is None  # a model the node lacks
    assert rule.left[0] == [1000] and rule.cpu[0] == 64000


def test_the_reference_fill_up_reads_arrivals_and_allocation_as_the_fill_up_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes = [OpenbNode("n1", 64000, 1 << 40, 2, "T4")]
    result = fill_up([Pod(1000, MIB, 0, 250)], nodes, "fgd-sim", seed=1)
    # Pods arrive until they ask 130 % of 2 GPUs: 11 quarters; 8 fit.
    assert result.pods == 11
    assert result.alloc[100] == pytest.approx(100.0)
    assert result.alloc[130] == pytest.approx(100.0)
    out = tiny_fillup(capsys, "fgd,fgd-sim")
    assert "| fgd, `share`, root | 1 |" in out and "| fgd-sim, `share`, pods | 1 |" in out
