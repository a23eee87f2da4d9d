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
    holding = [("h100", 2, {"h100-0": 1})]
    assert free_by_flavor_and_node([node], [flavor], holding) == {"h100": {"h100-0": 1}}
