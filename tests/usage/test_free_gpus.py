"""Free GPUs per node for the idle-iron figure (gpuqueue.services.accounting.utilization)."""

from __future__ import annotations

from gpuqueue.models import Flavor, Node
from gpuqueue.services.accounting.utilization import free_by_flavor_and_node

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_gpus_of_terminating_pods_are_not_free() -> None:
    flavor = Flavor(name="h100", resource_name="nvidia.com/gpu", node_selector=H100)
    node = Node(
        name="h100-0",
        capacity={"nvidia.com/gpu": 8},
        labels=H100,
        used_externally={"nvidia.com/gpu": 1},
        draining={"7": {"nvidia.com/gpu": 4}},
    )
    holding = [("h100", 2000, {"h100-0": 1})]  # a worker of 2 GPUs
    assert free_by_flavor_and_node([node], [flavor], holding) == {"h100": {"h100-0": 1}}


def test_fractional_workers_take_the_gpus_their_thousandths_add_up_to() -> None:
    """8 slices of 4 per GPU: 2 GPUs; 3 slices held by others' pods take one; three quarter
    GPUs of a job take the other."""
    flavor = Flavor(
        name="h100-shared",
        resource_name="nvidia.com/gpu.shared",
        node_selector=H100,
        shareable=True,
        slices_per_gpu=4,
    )
    node = Node(
        name="h100-0",
        capacity={"nvidia.com/gpu.shared": 12},
        labels=H100,
        used_externally={"nvidia.com/gpu.shared": 3},
    )
    holding = [("h100-shared", 250, {"h100-0": 3})]
    assert free_by_flavor_and_node([node], [flavor], holding) == {"h100-shared": {"h100-0": 1}}
