"""Which gated pods are released, and where (pure): a gang whole or not at all, each worker to
its planned node, never more GPUs on a node than it has."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.gates import Release, free_room, planned_hostname
from gpuqueue.cluster.gates import releases as releases_of
from gpuqueue.cluster.inventory import is_gpu_resource
from tests.cluster.conftest import made_by_gpuqueue, proven


def node(name: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}},
    }


def free_gpus(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{hostname: {resource: GPUs free}}, as `free_room` counts them."""
    return {
        hostname: {r: n for r, n in room.items() if is_gpu_resource(r)}
        for hostname, room in free_room(nodes, pods).items()
    }


def gang(
    job_id: int, plan: list[tuple[str, int]], gpus: int, *, created: int | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A gpuqueue Job and its gated pods, as the Job controller creates them."""
    labels = {
        mf.MANAGED_BY: mf.MANAGED_BY_VALUE,
        mf.LABEL_JOB_ID: str(job_id),
        mf.LABEL_ATTEMPT: "1",
    }
    workers = sum(n for _, n in plan)
    job = {
        "metadata": {"name": f"gq-{job_id}-1", "labels": labels},
        "spec": {"parallelism": workers},
    }
    pods = [
        {
            "metadata": {
                "name": f"gq-{job_id}-1-{i}",
                "namespace": "team-a",
                "labels": labels,
                "annotations": {
                    mf.COMPLETION_INDEX_ANNOTATION: str(i),
                    mf.PLACEMENT_ANNOTATION: json.dumps(plan),
                },
            },
            "spec": {
                "schedulingGates": [{"name": mf.PLACEMENT_GATE}],
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            },
            "status": {"phase": "Pending"},
        }
        for i in range(workers if created is None else created)
    ]
    return made_by_gpuqueue(job, pods), pods


def releases(
    jobs: list[dict[str, Any]], pods: list[dict[str, Any]], nodes: list[dict[str, Any]]
) -> tuple[list[Release], dict[tuple[int, int], str]]:
    """The gangs gpuqueue proves it made (its records: those of `jobs`), among every pod."""
    ours = proven(jobs, pods)
    return releases_of(ours.jobs, ours.pods, pods, nodes)


def other(on: str, gpus: int, **metadata: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": f"other-{on}-{gpus}", **metadata},
        "spec": {
            "nodeName": on,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def test_worker_i_belongs_to_the_i_th_slot_of_the_plan() -> None:
    _, pods = gang(1, [("a", 2), ("b", 1)], 4)
    assert [planned_hostname(p) for p in pods] == ["a", "a", "b"]


def test_a_gang_that_fits_is_released_whole_each_worker_to_its_node() -> None:
    job, pods = gang(1, [("a", 2), ("b", 1)], 4)
    out, held = releases([job], pods, [node("a", 8), node("b", 8)])
    assert held == {}
    assert Counter(r.hostname for r in out) == Counter({"a": 2, "b": 1})
    patch = out[0].patch()
    assert patch[0] == {"op": "replace", "path": "/spec/schedulingGates", "value": []}
    assert patch[1]["value"] == {"kubernetes.io/hostname": "a"}


def test_a_gang_whose_pods_are_not_all_created_yet_waits_quietly() -> None:
    job, pods = gang(1, [("a", 2)], 4, created=1)
    assert releases([job], pods, [node("a", 8)]) == ([], {})


def test_a_gang_whose_planned_node_was_taken_meanwhile_is_held_with_the_numbers() -> None:
    job, pods = gang(1, [("a", 2)], 4)
    out, held = releases([job], [*pods, other("a", 2)], [node("a", 8)])
    assert out == []
    assert held == {
        (1, 1): "planned node a has 6 nvidia.com/gpu free for 8 (taken by pods "
        "that started since the plan)"
    }


def test_a_pod_of_someone_else_naming_the_node_but_never_bound_holds_no_room() -> None:
    """Anyone can make a pod with the node's hostname in its node selector that never binds
    (another selector no node has): it holds nothing there, so no gang is held for it."""
    job, pods = gang(1, [("a", 1)], 8)
    pending = {
        "metadata": {"name": "pending", "namespace": "elsewhere"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "a", "no-such": "label"},
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Pending"},
    }
    out, held = releases([job], [*pods, pending], [node("a", 8)])
    assert held == {} and [r.hostname for r in out] == ["a"]


def test_a_terminating_pod_still_holds_its_gpus_and_the_gang_waits_for_them() -> None:
    """A victim saving its checkpoint holds its GPUs until its pods are gone; the gang planned
    there waits for them, and that is no failed start."""
    job, pods = gang(1, [("a", 1)], 8)
    leaving = other("a", 8, deletionTimestamp="2026-11-24T00:00:00Z")
    out, held = releases([job], [*pods, leaving], [node("a", 8)])
    assert out == [] and held == {}


def test_a_gang_short_of_more_than_the_terminating_pods_give_back_is_held() -> None:
    job, pods = gang(1, [("a", 1)], 8)
    leaving = other("a", 4, deletionTimestamp="2026-11-24T00:00:00Z")
    staying = {**other("a", 2), "metadata": {"name": "staying"}}
    out, held = releases([job], [*pods, leaving, staying], [node("a", 8)])
    assert out == [] and held == {
        (1, 1): "planned node a has 2 nvidia.com/gpu free for 8 (taken by pods "
        "that started since the plan)"
    }


def test_a_pod_labelled_as_a_gang_s_but_not_made_by_its_job_is_never_released() -> None:
    job, pods = gang(1, [("a", 1)], 4)
    _, (forged,) = gang(1, [("a", 1)], 4)  # same labels, gate and plan: no ownerReference
    forged["metadata"]["name"] = "forged"
    forged["metadata"].pop("ownerReferences")
    out, held = releases([job], [*pods, forged], [node("a", 8)])
    assert [r.name for r in out] == ["gq-1-1-0"] and held == {}


def test_two_gangs_for_the_last_room_the_first_is_released_the_second_held() -> None:
    first, first_pods = gang(1, [("a", 1)], 8)
    second, second_pods = gang(2, [("a", 1)], 8)
    out, held = releases([first, second], first_pods + second_pods, [node("a", 8)])
    assert [r.name for r in out] == ["gq-1-1-0"] and list(held) == [(2, 1)]


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.lists(st.integers(0, 8), min_size=1, max_size=4),
    gangs=st.lists(
        st.tuples(
            st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=3),
            st.integers(1, 4),
        ),
        max_size=5,
    ),
    taken=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), max_size=3),
)
def test_releases_are_all_or_nothing_and_never_overfill_a_node(
    capacity: list[int], gangs: list[Any], taken: list[tuple[int, int]]
) -> None:
    names = [f"n{i}" for i in range(len(capacity))]
    nodes = [node(n, c) for n, c in zip(names, capacity, strict=True)]
    jobs, pods = [], [other(names[i % len(names)], g) for i, g in taken]
    for job_id, (plan, gpus) in enumerate(gangs, start=1):
        slots = [(names[i % len(names)], workers) for i, workers in plan]
        job, gang_pods = gang(job_id, slots, gpus)
        jobs.append(job)
        pods += gang_pods
    out, held = releases(jobs, pods, nodes)
    released = defaultdict(list)
    for one in out:
        released[int(one.name.split("-")[1])].append(one)
    for job_id, (plan, _) in enumerate(gangs, start=1):
        workers = sum(w for _, w in plan)
        # All or nothing, and never both released and held.
        assert len(released[job_id]) in (0, workers)
        assert not (released[job_id] and (job_id, 1) in held)
    # What was released fits beside what others hold.
    after = [
        {
            **p,
            "spec": {
                **p["spec"],
                "schedulingGates": [],
                "nodeSelector": {"kubernetes.io/hostname": r.hostname},
            },
        }
        for p in pods
        for r in out
        if r.name == p["metadata"]["name"]
    ]
    others = [p for p in pods if not p["metadata"]["name"].startswith("gq-")]
    for name, free in free_gpus(nodes, others + after).items():
        before = free_gpus(nodes, others)[name].get("nvidia.com/gpu", 0)
        assert free.get("nvidia.com/gpu", 0) >= min(before, 0)


def busy(on: str, name: str, **requests: str) -> dict[str, Any]:
    """Someone's running pod on `on` requesting CPU or memory, no GPU."""
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": on, "containers": [{"resources": {"requests": requests}}]},
        "status": {"phase": "Running"},
    }


def full_node(name: str, **spec: Any) -> dict[str, Any]:
    """A node as the API lists it: GPUs, CPU, memory and pods allocatable."""
    n = node(name, 8)
    n["status"]["allocatable"].update(cpu="64", memory="512Gi", pods="110")
    n["spec"] = spec
    return n


def asking(pods: list[dict[str, Any]], **requests: str) -> list[dict[str, Any]]:
    for pod in pods:
        pod["spec"]["containers"][0]["resources"]["requests"] = dict(requests)
    return pods


def test_a_cordoned_planned_node_holds_the_gang() -> None:
    job, pods = gang(1, [("a", 1)], 8)
    out, held = releases([job], pods, [full_node("a", unschedulable=True)])
    assert out == [] and held == {(1, 1): "planned node a is cordoned"}


def test_a_taint_the_workers_do_not_tolerate_holds_the_gang_and_one_they_do_does_not() -> None:
    taint = {"key": "maintenance", "value": "bios", "effect": "NoExecute"}
    job, pods = gang(1, [("a", 1)], 8)
    out, held = releases([job], pods, [full_node("a", taints=[taint])])
    assert out == [] and held == {
        (1, 1): "planned node a has the taint maintenance=bios:NoExecute, which worker"
        " gq-1-1-0 does not tolerate"
    }
    pods[0]["spec"]["tolerations"] = [{"key": "maintenance", "operator": "Exists"}]
    out, held = releases([job], pods, [full_node("a", taints=[taint])])
    assert len(out) == 1 and held == {}
    # A PreferNoSchedule taint never keeps a pod off.
    soft = {"key": "busy", "effect": "PreferNoSchedule"}
    job, pods = gang(2, [("a", 1)], 8)
    assert len(releases([job], pods, [full_node("a", taints=[soft])])[0]) == 1


def test_cpu_memory_and_pod_count_are_checked_as_kube_scheduler_would() -> None:
    job, pods = gang(1, [("a", 2)], 4)
    asking(pods, cpu="16", memory="64Gi")
    nodes = [full_node("a")]
    assert len(releases([job], pods, nodes)[0]) == 2
    out, held = releases([job], [*pods, busy("a", "cpu-hog", cpu="40")], nodes)
    assert out == [] and held == {
        (1, 1): "planned node a has 24000m cpu free for 32000m cpu (taken by pods that"
        " started since the plan)"
    }
    out, held = releases([job], [*pods, busy("a", "mem-hog", memory="400Gi")], nodes)
    assert out == [] and held == {
        (1, 1): "planned node a has 114688 MiB memory free for 131072 MiB memory (taken by"
        " pods that started since the plan)"
    }
    crowded = [busy("a", f"p{i}", cpu="1m") for i in range(109)]
    out, held = releases([job], [*pods, *crowded], nodes)
    assert out == [] and held == {
        (1, 1): "planned node a takes 1 more pods, not 2 (its pod limit, reached by pods"
        " that started since the plan)"
    }
