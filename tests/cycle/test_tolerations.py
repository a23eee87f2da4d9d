"""Node taints reach the planner: a tainted node is offered only to flavors that tolerate it."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from gpuqueue.core.errors import Refused
from gpuqueue.cycle.launch import launch_spec
from gpuqueue.cycle.snapshot import load_nodes
from gpuqueue.models import Flavor, Node
from gpuqueue.services.cluster.inventory import flavor_nodes
from gpuqueue.services.quotas.flavors import save_flavor

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
DEDICATED = {"key": "dedicated", "value": "research", "effect": "NoSchedule"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(name: str, taints: list[dict[str, str]]) -> Node:
    return Node.objects.create(
        name=name, capacity={"nvidia.com/gpu": 8}, labels=H100, taints=taints
    )


def offered(flavor: str) -> list[str]:
    return [n.name for n in load_nodes() if flavor in n.capacity]


def test_a_tainted_node_is_offered_only_to_the_flavor_that_tolerates_it(world: Any) -> None:
    research = Flavor.objects.create(
        name="h100-research",
        resource_name="nvidia.com/gpu",
        node_selector=H100,
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "research"}],
    )
    node("plain", [GPU_TAINT])  # every GPU node's taint: gpuqueue's pods always tolerate it
    node("reserved", [GPU_TAINT, DEDICATED])
    node("soft", [{"key": "dedicated", "value": "other", "effect": "PreferNoSchedule"}])
    node("other", [{"key": "dedicated", "value": "other", "effect": "NoExecute"}])

    assert offered("h100") == ["plain", "soft"]
    assert offered("h100-research") == ["plain", "reserved", "soft"]
    # The submission check and the capacity figures see the same nodes as the planner.
    assert [n.name for n in flavor_nodes(research)] == ["plain", "reserved", "soft"]
    assert [n.name for n in flavor_nodes(world.h100)] == ["plain", "soft"]


def test_the_gpu_taint_follows_the_setting(world: Any, settings: Any) -> None:
    node("n1", [{"key": "example.com/gpu", "effect": "NoSchedule"}])
    assert offered("h100") == []
    settings.GPUQUEUE_K8S_GPU_TAINT = "example.com/gpu"
    assert offered("h100") == ["n1"]


def test_a_flavor_that_tolerates_everything_is_offered_every_node(world: Any) -> None:
    Flavor.objects.filter(pk=world.h100.pk).update(tolerations=[{"operator": "Exists"}])
    node("n1", [DEDICATED, {"key": "x", "effect": "NoExecute"}])
    assert offered("h100") == ["n1"]


def test_the_model_refuses_invalid_tolerations_at_the_field(world: Any) -> None:
    world.h100.tolerations = [{"key": "a", "operator": "In"}]
    with pytest.raises(ValidationError) as raised:
        world.h100.full_clean()
    assert raised.value.message_dict == {
        "tolerations": ["Toleration 1: operator 'In' is not one of Equal, Exists."]
    }


def test_the_flavor_service_refuses_invalid_tolerations(world: Any) -> None:
    with pytest.raises(Refused) as raised:
        save_flavor(world.root, world.h100, tolerations=[{"value": "x"}])
    assert raised.value.fields == {
        "tolerations": ["Toleration 1: a toleration without a key must use the operator Exists."]
    }
    world.h100.refresh_from_db()
    assert world.h100.tolerations == []
    saved = save_flavor(world.root, world.h100, tolerations=[{"key": "a", "operator": "Exists"}])
    assert saved.tolerations == [{"key": "a", "operator": "Exists"}]


def test_the_launch_carries_the_flavor_tolerations(world: Any, submit: Any) -> None:
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "research"}]
    Flavor.objects.filter(pk=world.h100.pk).update(tolerations=tolerations)
    job = submit()
    job.refresh_from_db()
    assert list(launch_spec(job).tolerations) == tolerations


def test_the_admin_form_shows_invalid_tolerations_at_the_field(world: Any, client: Any) -> None:
    client.force_login(world.root)
    url = f"/admin/gpuqueue/flavor/{world.h100.pk}/change/"
    form = {
        "name": "h100",
        "resource_name": "nvidia.com/gpu",
        "node_selector": '{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}',
        "cpu_millicores_per_gpu": "12000",
        "memory_mib_per_gpu": "98304",
        "description": "",
        # selects with no empty choice: the browser always sends one
        "idle_policy": "flag",
        "sharing_strategy": "TimeSlicing",
    }
    refused = client.post(url, {**form, "tolerations": '[{"key": "a", "effect": "NoRun"}]'})
    assert refused.status_code == 200  # the form again, with the error at the field
    assert refused.context["adminform"].form.errors == {
        "tolerations": [
            "Toleration 1: effect 'NoRun' is not one of NoSchedule, PreferNoSchedule, "
            "NoExecute (or empty for every effect)."
        ]
    }
    saved = client.post(url, {**form, "tolerations": '[{"key": "a", "operator": "Exists"}]'})
    assert saved.status_code == 302
    world.h100.refresh_from_db()
    assert world.h100.tolerations == [{"key": "a", "operator": "Exists"}]
