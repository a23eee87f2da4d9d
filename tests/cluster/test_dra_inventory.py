"""Pure: the DRA devices each flavor may get per node, and those others' claims hold
(gpuqueue.cluster.dra), and the part of CEL gpuqueue evaluates (gpuqueue.core.device_selector)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuqueue.cluster.base import LaunchSpec
from gpuqueue.cluster.dra import DeviceFlavor, devices, dra_use
from gpuqueue.cluster.manifests import (
    ClusterOptions,
    claim_template_manifest,
    job_manifest,
    pod_group_manifest,
)
from gpuqueue.cluster.proof import Record, is_our_claim_template
from gpuqueue.core.device_selector import DeviceView, SelectorError, parse

D = "gpu.nvidia.com"
GPU_CLASS = {
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": f"device.driver == '{D}' && "
                    f"device.attributes['{D}'].type == 'gpu'"
                }
            }
        ]
    },
}
H200 = DeviceFlavor(
    "dra.gpuqueue.dev/h200", "gpu.nvidia.com", f"device.attributes['{D}'].productName == 'H200'"
)


def gpu(name: str, product: str = "H200", kind: str = "gpu") -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"type": {"string": kind}, "productName": {"string": product}},
        "capacity": {"memory": {"value": "141Gi"}},
    }


def slice_of(
    node: str, devs: list[dict[str, Any]], generation: int = 1, **spec: Any
) -> dict[str, Any]:
    return {
        "spec": {
            "driver": D,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devs,
            **spec,
        }
    }


def claim(
    node: str, device: str, pod: str, namespace: str = "others", reserved: bool = True
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{pod}-gpus", "namespace": namespace}
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpus", "driver": D, "pool": node, "device": device}]
            }
        }
    }
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": "u"}]
    else:
        meta["ownerReferences"] = [{"kind": "Pod", "name": pod, "uid": "u", "controller": True}]
    return {"metadata": meta, "status": status}


def pod(
    name: str, namespace: str = "others", phase: str = "Running", deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


SLICES = [
    slice_of(
        "n0", [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2", product="L4"), gpu("mig-0", kind="mig")]
    ),
    slice_of("n1", [gpu("gpu-0"), gpu("gpu-1")]),
]


def test_a_flavor_counts_the_devices_of_its_class_that_its_selector_selects() -> None:
    use = dra_use([H200], SLICES, [GPU_CLASS], [], [])
    assert use.capacity == {"n0": {H200.resource_name: 2}, "n1": {H200.resource_name: 2}}
    assert use.external == {}


def test_only_a_pools_newest_generation_counts_and_shared_slices_not_at_all() -> None:
    old = slice_of("n1", [gpu(f"old-{i}") for i in range(8)], generation=0)
    everywhere = slice_of("", [gpu("net-0")], allNodes=True)
    use = dra_use([H200], [*SLICES, old, everywhere], [GPU_CLASS], [], [])
    assert use.capacity["n1"] == {H200.resource_name: 2}
    assert "" not in use.capacity


def test_claims_of_others_hold_devices_and_a_live_workers_are_the_databases() -> None:
    claims = [
        claim("n0", "gpu-0", "theirs"),
        claim("n1", "gpu-0", "worker-0", namespace="team-a"),  # a live job's running worker
        claim("n1", "gpu-1", "old-worker", namespace="team-a", reserved=False),  # stopped attempt
        claim("n0", "gpu-1", "done"),  # a finished pod's claim, about to be released
    ]
    pods = [
        pod("theirs"),
        pod("worker-0", "team-a"),
        pod("old-worker", "team-a"),
        pod("done", phase="Succeeded"),
    ]
    ours = {("team-a", "worker-0"): (7, 2), ("team-a", "old-worker"): (7, 1)}
    use = dra_use([H200], SLICES, [GPU_CLASS], claims, pods, live={(7, 2)}, ours=ours)
    assert use.external == {"n0": {H200.resource_name: 1}}
    assert use.draining == {"n1": {7: {H200.resource_name: 1}}}


def test_a_shared_claim_one_live_worker_still_uses_is_the_databases() -> None:
    """A shared GPU's claim reserved for a stopped sharer's terminating pod and a live job's
    running one: the live job's placement counts the GPU (not draining besides)."""
    shared = claim("n1", "gpu-0", "live", namespace="team-a")
    shared["status"]["reservedFor"].insert(0, {"resource": "pods", "name": "stopped", "uid": "s"})
    pods = [pod("live", "team-a"), pod("stopped", "team-a", deleting=True)]
    ours = {("team-a", "live"): (8, 1), ("team-a", "stopped"): (9, 1)}
    use = dra_use([H200], SLICES, [GPU_CLASS], [shared], pods, live={(8, 1)}, ours=ours)
    assert (use.external, use.draining) == ({}, {})
    # Once the live one is gone, the device drains back to the stopped job's.
    shared["status"]["reservedFor"].pop()
    alone = dra_use([H200], SLICES, [GPU_CLASS], [shared], pods[1:], live=set(), ours=ours)
    assert alone.draining == {"n1": {9: {H200.resource_name: 1}}}


def test_a_claim_with_gpuqueues_labels_but_no_proof_is_anothers() -> None:
    """Labels are hints: a pod that no proven Job owns is not in `ours`."""
    use = dra_use(
        [H200],
        SLICES,
        [GPU_CLASS],
        [claim("n0", "gpu-0", "lookalike", "team-a")],
        [pod("lookalike", "team-a")],
        live={(7, 2)},
        ours={},
    )
    assert use.external == {"n0": {H200.resource_name: 1}}


def test_a_class_whose_cel_gpuqueue_cannot_evaluate_offers_nothing() -> None:
    odd = {
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.attributes.exists(a, true)"}}]},
    }
    assert dra_use([H200], SLICES, [odd], [], []).capacity == {}
    assert dra_use([H200], SLICES, [], [], []).capacity == {}  # no such class


def test_unqualified_attributes_are_in_the_drivers_domain() -> None:
    [device] = devices([slice_of("n0", [gpu("gpu-0")])])
    assert device.view.attributes[f"{D}/productName"] == "H200"
    assert device.view.capacity[f"{D}/memory"] == 141 << 30


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        (f"device.driver == '{D}'", True),
        (f'device.attributes["{D}"].productName == "H200"', True),
        (f"device.attributes['{D}']['productName'] != 'H200'", False),
        (f"(device.attributes['{D}'].index >= 2) && device.attributes['{D}'].index < 4", True),
        (f"device.capacity['{D}'].memory.compareTo(quantity('80Gi')) >= 0", True),
        (f"device.capacity['{D}'].memory.compareTo(quantity('200Gi')) >= 0", False),
        (f"device.attributes['{D}'].mig == true", False),
        (f"device.attributes['{D}'].missing == 'x'", False),
        ("", True),
    ],
)
def test_the_selectors_gpuqueue_evaluates(text: str, matches: bool) -> None:
    view = DeviceView(
        D,
        {f"{D}/productName": "H200", f"{D}/index": 3, f"{D}/mig": False},
        {f"{D}/memory": 141 << 30},
    )
    assert parse(text)(view) is matches


@pytest.mark.parametrize(
    "text",
    [
        "device.driver == 'a' || device.driver == 'b'",
        "device.attributes['d'].x.matches('H.*')",
        "device.attributes['d'].x == 'a' &&",
        "device.driver < 'a'",
        "x == 1",
        "device.attributes[1].x == 'a'",
    ],
)
def test_a_selector_outside_what_gpuqueue_evaluates_is_refused(text: str) -> None:
    with pytest.raises(SelectorError):
        parse(text)


def cel(text: str) -> str:
    """A CEL string literal of any text."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@given(
    values=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.text(min_size=0, max_size=5)),
    wanted=st.dictionaries(
        st.sampled_from(["a", "b", "c"]), st.text(min_size=0, max_size=5), min_size=1
    ),
)
def test_a_conjunction_of_equalities_matches_exactly_the_devices_with_those_values(
    values: dict[str, str], wanted: dict[str, str]
) -> None:
    text = " && ".join(f"device.attributes['d'].{k} == {cel(v)}" for k, v in sorted(wanted.items()))
    view = DeviceView("d", {f"d/{k}": v for k, v in values.items()}, {})
    assert parse(text)(view) == all(values.get(k) == v for k, v in wanted.items())


def spec(**fields: Any) -> LaunchSpec:
    base: dict[str, Any] = dict(
        job_id=7,
        attempt=1,
        team="a",
        namespace="team-a",
        name="train",
        image="i",
        command=[],
        env={},
        labels={},
        annotations={},
        workers=2,
        gpus_per_worker=4,
        resource_name="dra.gpuqueue.dev/h200",
        placement={"n0": 1, "n1": 1},
        checkpoint_grace_seconds=30,
        max_runtime_seconds=None,
        proof="p" * 64,
        instance="gq",
        device_class="gpu.nvidia.com",
        device_selector=H200.selector,
    )
    return LaunchSpec(**{**base, **fields})


def test_a_dra_worker_claims_its_devices_from_the_attempts_template_and_asks_no_resource() -> None:
    job = job_manifest(spec(), ClusterOptions(), {})
    pod = job["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "gq-7-1-gpus"}]
    container = pod["containers"][0]
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    assert not any(k.startswith("dra.") for k in container["resources"]["limits"])
    assert "schedulingGroup" not in pod
    template = claim_template_manifest(spec())
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 4,
        "selectors": [{"cel": {"expression": H200.selector}}],
    }


def test_an_extended_resource_worker_is_as_before_and_a_gang_carries_its_pod_group_on_1_37() -> (
    None
):
    plain = spec(device_class="", device_selector="", resource_name="nvidia.com/gpu")
    job = job_manifest(plain, ClusterOptions(pod_group=True), {})
    pod = job["spec"]["template"]["spec"]
    assert "resourceClaims" not in pod
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert pod["schedulingGroup"] == {"podGroupName": "gq-7-1"}
    group = pod_group_manifest(plain)
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}


def test_a_claim_template_is_gpuqueues_only_with_the_attempts_proof_and_owner() -> None:
    record = Record(namespace="team-a", proof="p" * 64)
    owner = {"metadata": {"name": "gq-7-1-token", "uid": "s1"}}
    made = claim_template_manifest(spec(), owner)
    assert is_our_claim_template(made, (7, 1), record, "s1")
    assert not is_our_claim_template(made, (7, 1), record, "other-secret")
    forged = {**made, "metadata": {**made["metadata"], "annotations": {}}}
    assert not is_our_claim_template(forged, (7, 1), record, "s1")
