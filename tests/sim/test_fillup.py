"""The openb fill-up: every pod kept, GPU sharing as fractions, FGD's procedure and measures."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuqueue.scheduler.fragmentation import Shape, Workload
from gpuqueue.sim.cli import main
from gpuqueue.sim.fillup import (
    MIB,
    FgdMeasure,
    OpenbNode,
    Pod,
    fill_up,
    load_nodes,
    load_pods,
    target_workload,
)

FIXTURES = Path(__file__).parent / "fixtures"


def test_every_pod_is_kept_a_sharing_pod_as_a_fraction_with_its_cpu_and_memory() -> None:
    pods, sharing = load_pods(FIXTURES / "openb_pods_tiny.csv")
    assert sharing == 1
    assert pods == [
        Pod(12000, 16384 * MIB, 1, 0),
        Pod(6000, 12288 * MIB, 0, 460),
        Pod(6000, 12288 * MIB, 0, 0),
        Pod(6000, 12288 * MIB, 8, 0),
    ]
    skipped, _ = load_pods(FIXTURES / "openb_pods_tiny.csv", "skip")
    assert len(skipped) == 3
    rounded, _ = load_pods(FIXTURES / "openb_pods_tiny.csv", "round-up")
    assert rounded[1] == Pod(6000, 12288 * MIB, 1, 0)
    with pytest.raises(ValueError, match="fractional"):
        load_pods(FIXTURES / "openb_pods_tiny.csv", "halve")


def test_gpu_nodes_keep_their_cpu_memory_and_model() -> None:
    nodes = load_nodes(FIXTURES / "openb_nodes_tiny.csv")
    assert nodes == [
        OpenbNode("openb-node-0000", 64000, 262144 * MIB, 2, "P100"),
        OpenbNode("openb-node-0001", 96000, 786432 * MIB, 8, "G2"),
    ]


def test_four_quarter_pods_fill_one_gpu_and_the_allocation_counts_thousandths() -> None:
    nodes = [OpenbNode("n1", 64000, 1 << 40, 2, "T4")]
    pods = [Pod(1000, MIB, 0, 250)]
    result = fill_up(pods, nodes, "fgd", seed=1)
    # Pods arrive until they ask 130 % of 2 GPUs: 11 quarters; 8 fit.
    assert result.pods == 11
    assert result.alloc[100] == pytest.approx(100.0)
    assert result.alloc[130] == pytest.approx(100.0)


def test_cpu_and_memory_stop_pods_that_gpus_would_take() -> None:
    nodes = [OpenbNode("n1", 4000, 1 << 40, 4, "T4")]
    pods = [Pod(2000, MIB, 1, 0)]  # two fit the CPU, four the GPUs
    result = fill_up(pods, nodes, "binpack", seed=1)
    assert result.alloc[130] == pytest.approx(50.0)


def test_a_pod_bound_to_a_model_goes_only_to_nodes_of_that_model() -> None:
    nodes = [OpenbNode("a", 64000, 1 << 40, 2, "T4"), OpenbNode("b", 64000, 1 << 40, 2, "V100")]
    pods = [Pod(1000, MIB, 1, 0, ("V100",))]
    result = fill_up(pods, nodes, "fgd", seed=1)
    assert result.alloc[130] == pytest.approx(50.0)  # only b's two GPUs


def test_fragmentation_is_the_free_gpu_the_workload_cannot_use() -> None:
    whole = Workload([(Shape(1, 0, 0, 0), 1.0)])
    # A GPU 300 thousandths used: its 700 free are lost to whole-GPU tasks; a free GPU is not.
    assert whole.fragmentation(1, {0: 300}, 1000, 1000, None) == 700
    # No CPU left for the task: every free thousandth is lost.
    cpu_bound = Workload([(Shape(1, 0, 500, 0), 1.0)])
    assert cpu_bound.fragmentation(1, {0: 300}, 100, 1000, None) == 1700
    # Half the tasks ask 500 thousandths: the 700 free serve them, 200 free do not.
    mixed = Workload([(Shape(1, 0, 0, 0), 1.0), (Shape(0, 500, 0, 0), 1.0)])
    assert mixed.fragmentation(0, {0: 300, 1: 800}, 1000, 1000, None) == pytest.approx(
        0.5 * 900 + 0.5 * 200
    )
    # A task bound to another model cannot use any of it.
    bound = Workload([(Shape(1, 0, 0, 0, ("A100",)), 1.0)])
    assert bound.fragmentation(2, {}, 1000, 1000, "T4") == 2000


@pytest.mark.parametrize(
    ("weights", "large", "small"),
    [("root", 2 / 3, 1 / 3), ("requests", 4 / 5, 1 / 5), ("pods", 1 / 2, 1 / 2)],
)
def test_the_target_workload_weighs_each_pod_by_a_power_of_its_requests(
    weights: str, large: float, small: float
) -> None:
    """A 4-GPU pod and a 1-GPU pod (no CPU): each weighs its requests to the power ½, 1 or 0."""
    workload = target_workload([Pod(0, MIB, 4, 0), Pod(0, MIB, 1, 0)], 8000, weights)
    mass = {gpus: total for gpus, _, _, total, _ in workload.groups}
    assert mass == {4: pytest.approx(large), 1: pytest.approx(small)}
    with pytest.raises(ValueError, match="weights must be one of root, requests, pods"):
        target_workload([Pod(0, MIB, 1, 0)], 8000, "gpus")


def test_fgd_measure_counts_what_fgd_counts() -> None:
    """Typical pods: a whole GPU (3 of 4 pods) and a CPU-only pod; a node with one free GPU
    and one 600 used: the 400 free are lost to whole-GPU pods, and everything free counts for
    the CPU-only pod, as in FGD's frag.go."""
    pods = [Pod(1000, MIB, 1, 0)] * 3 + [Pod(1000, MIB, 0, 0)]
    measure = FgdMeasure(pods, popularity=1.0)
    assert measure.node([1000, 400], 8000, "T4") == pytest.approx(0.75 * 400 + 0.25 * 1400)
    # Too little CPU for the GPU pod: all 1400 count for it too.
    assert measure.node([1000, 400], 500, "T4") == pytest.approx(1400)
    # At 70 % popularity only the whole-GPU shape is typical.
    assert FgdMeasure(pods, popularity=0.7).node([1000, 400], 8000, "T4") == pytest.approx(400)


def tiny_fillup(capsys: pytest.CaptureFixture[str], policies: str) -> str:
    """`gpuqueue.sim fillup` of the tiny fixtures with `policies`: what it prints."""
    code = main(
        [
            "fillup",
            "--trace",
            str(FIXTURES / "openb_pods_tiny.csv"),
            "--nodes",
            str(FIXTURES / "openb_nodes_tiny.csv"),
            "--policies",
            policies,
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    return out


def test_the_fillup_command_prints_one_row_per_placement(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tiny_fillup(capsys, "binpack,fgd")
    assert "4 pods kept (1 GPU-sharing pods share, 1 CPU-only)" in out
    assert "| binpack, `share`, root | 1 |" in out and "| fgd, `share`, root | 1 |" in out
