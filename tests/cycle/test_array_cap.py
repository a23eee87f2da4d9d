"""An array's %K on the real cycle: never more than K tasks hold GPUs, the lowest indices go
first, and a finished task frees its slot for the next."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from gpuqueue.core.states import HOLDING, JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from gpuqueue.services.jobs.array_spec import parse
from gpuqueue.services.jobs.arrays import hold_over_limit, submit_array
from gpuqueue.services.jobs.dependencies import Dependencies
from gpuqueue.services.jobs.transitions import transition


def _one_gpu_sweep(world: Any, spec: str) -> Any:
    fields = {"name": "sweep", "image": "ghcr.io/acme/train:1", "gpus_per_worker": 1}
    return submit_array(
        world.alice, world.team_a, world.h100, fields, parse(spec), Dependencies()
    ).array


def _holding(array_id: int) -> list[int]:
    tasks = Job.objects.filter(array_id=array_id, state__in=HOLDING).order_by("array_index")
    return list(tasks.values_list("array_index", flat=True))


def test_the_cycle_never_admits_a_task_past_the_arrays_cap(world: Any, backend: Any) -> None:
    sync_cluster(backend)
    array = _one_gpu_sweep(world, "0-19%3")
    # 32 H100s free and 20 one-GPU tasks: only the cap holds them back.
    result = run_cycle(backend=backend)
    assert len(result.admitted) == 3 and _holding(array.pk) == [0, 1, 2]
    assert run_cycle(backend=backend).admitted == []
    waiting = Job.objects.get(array=array, array_index=3)
    assert waiting.pending_reason["code"] == "array_limit"

    Job.objects.filter(array=array, array_index=1).update(
        state=JobState.SUCCEEDED, finished_at=timezone.now()
    )
    result = run_cycle(backend=backend)
    assert len(result.admitted) == 1 and _holding(array.pk) == [0, 2, 3]
    for _ in range(3):  # cycles in a row change nothing while no slot frees
        run_cycle(backend=backend)
        assert len(_holding(array.pk)) == 3


def test_an_uncapped_array_is_offered_whole(world: Any, backend: Any) -> None:
    sync_cluster(backend)
    array = _one_gpu_sweep(world, "0-9")
    assert len(run_cycle(backend=backend).admitted) == 10
    assert len(_holding(array.pk)) == 10


def test_each_task_gets_its_index_count_and_value_on_both_backends(
    world: Any, backend: Any
) -> None:
    from gpuqueue.cluster import manifests as mf
    from gpuqueue.cycle.launch import launch_spec
    from gpuqueue.models import SimulatedWorkload

    sync_cluster(backend)
    fields = {"name": "sweep", "image": "ghcr.io/acme/train:1", "env": {"LR": "x"}}
    spec = parse({"values": ["0.1", "0.01"]})
    array = submit_array(world.alice, world.team_a, world.h100, fields, spec, Dependencies()).array
    run_cycle(backend=backend)
    second = Job.objects.select_related("team", "flavor").get(array=array, array_index=1)
    want = {
        "LR": "x",
        "GPUQUEUE_ARRAY_ID": str(array.pk),
        "GPUQUEUE_ARRAY_INDEX": "1",
        "GPUQUEUE_ARRAY_COUNT": "2",
        "GPUQUEUE_ARRAY_VALUE": "0.01",
    }
    simulated = SimulatedWorkload.objects.get(job_id=second.pk).env
    assert {key: simulated[key] for key in want} == want
    manifest = mf.job_manifest(
        launch_spec(second),
        mf.ClusterOptions(public_url="http://gpuqueue"),
        {node: node for node in second.placement},
    )
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {key: env[key] for key in want} == want


def test_the_hold_phase_counts_the_tasks_it_moves_and_says_why_each_held_one_waits(
    world: Any,
) -> None:
    array = _one_gpu_sweep(world, "0-4%2")

    def reason(index: int) -> Any:
        return Job.objects.get(array=array, array_index=index).pending_reason

    # Submitted with the first two offered, the rest held: nothing for the hold phase to move.
    assert hold_over_limit() == 0
    assert reason(0) is None and [reason(i)["code"] for i in (2, 3, 4)] == ["array_limit"] * 3
    first = Job.objects.get(array=array, array_index=0)
    assert transition(first, JobState.CANCELLED, reason="by hand", actor="user:alice")
    assert hold_over_limit() == 1  # task 2 takes the freed slot
    assert reason(2) is None and reason(3)["code"] == "array_limit"
