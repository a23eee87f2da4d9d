"""Pure: the placement gate counts a DRA flavor's devices before it releases a gang. A worker
carries its devices (gpuqueue.dev/devices); the devices others' claims hold are off the node's
(gpuqueue.cluster.dra.gate_room); a gang short of them is held with the numbers, or waits when
a terminating pod's claim gives them back."""

from __future__ import annotations

import json
from typing import Any

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.dra import gate_room
from gpuqueue.cluster.gates import dra_devices
from tests.cluster.conftest import proven
from tests.cluster.test_dra_inventory import GPU_CLASS, H200, SLICES, claim, pod
from tests.cluster.test_gates import gang, node, releases_of

R = H200.resource_name


def dra_gang(job_id: int, plan: list[tuple[str, int]], devices: int) -> tuple[Any, list[Any]]:
    """A gang of a DRA flavor: its workers ask no GPU resource and carry their devices."""
    job, pods = gang(job_id, plan, 0)
    for one in pods:
        one["spec"]["containers"] = [{"resources": {}}]
        one["metadata"]["annotations"][mf.DEVICES_ANNOTATION] = json.dumps({R: devices})
    return job, pods


def released(
    job: Any,
    pods: list[Any],
    claims: list[Any],
    others: list[Any] = (),  # type: ignore[assignment]
) -> tuple[list[Any], dict[Any, str]]:
    everyone = [*pods, *others]
    ours = proven([job], pods)
    room = gate_room([H200], SLICES, [GPU_CLASS], claims, everyone, set(ours.pod_keys))
    return releases_of(ours.jobs, ours.pods, everyone, [node("n0", 0), node("n1", 0)], room)


def test_a_worker_carries_its_devices_and_nothing_else_does() -> None:
    _, pods = dra_gang(1, [("n0", 1)], 2)
    assert dra_devices(pods[0]) == {R: 2}
    forged = {"metadata": {"annotations": {mf.DEVICES_ANNOTATION: '{"nvidia.com/gpu": -3}'}}}
    assert dra_devices(forged) == {}
    assert dra_devices({"metadata": {"annotations": {mf.DEVICES_ANNOTATION: "[1]"}}}) == {}


def test_a_gang_whose_devices_fit_is_released() -> None:
    job, pods = dra_gang(1, [("n0", 1), ("n1", 1)], 2)  # n0 and n1 have 2 H200 each
    out, held = released(job, pods, [])
    assert held == {} and sorted(r.hostname for r in out) == ["n0", "n1"]


def test_a_gang_whose_devices_anothers_claim_took_since_the_plan_is_held() -> None:
    job, pods = dra_gang(1, [("n0", 1)], 2)
    out, held = released(job, pods, [claim("n0", "gpu-0", "theirs")], [pod("theirs")])
    assert out == []
    assert held == {
        (1, 1): f"planned node n0 has 1 {R} free for 2 (taken by pods that started since the plan)"
    }


def test_devices_a_terminating_pods_claim_holds_come_back_and_the_gang_waits() -> None:
    job, pods = dra_gang(1, [("n0", 1)], 2)
    out, held = released(
        job, pods, [claim("n0", "gpu-0", "theirs")], [pod("theirs", deleting=True)]
    )
    assert (out, held) == ([], {})


def test_claims_of_gpuqueues_own_workers_are_counted_once_by_their_pods() -> None:
    """The first gang runs on n0's 2 devices (its claim allocated, its pod bound): the second
    gang's worker finds none there (its devices counted once, by its pod) and is held."""
    first, first_pods = dra_gang(1, [("n0", 1)], 2)
    first_pods[0]["spec"] = {"nodeName": "n0", "containers": [{"resources": {}}]}
    first_pods[0]["status"] = {"phase": "Running"}
    second, second_pods = dra_gang(2, [("n0", 1)], 1)
    both = [*first_pods, *second_pods]
    ours = proven([first, second], both)
    worker = first_pods[0]["metadata"]["name"]
    claims = [claim("n0", "gpu-0", worker, "team-a"), claim("n0", "gpu-1", worker, "team-a")]
    room = gate_room([H200], SLICES, [GPU_CLASS], claims, both, set(ours.pod_keys))
    assert room == ({"n0": {R: 2}, "n1": {R: 2}}, {})
    out, held = releases_of(ours.jobs, ours.pods, both, [node("n0", 0), node("n1", 0)], room)
    assert out == [] and "has 0" in held[(2, 1)]
