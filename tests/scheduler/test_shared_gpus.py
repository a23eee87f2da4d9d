"""Shared GPUs, GPU models and the fragmentation strategy: examples, then invariants.

Examples: four quarter-GPU jobs share one GPU and a fifth opens another; whole-GPU work never
lands on a partly used GPU; quotas count fractions exactly; a job bound to GPU models goes only to
nodes of those models, and others leave the scarce models to it. Invariants (Hypothesis): no GPU
above 1000 thousandths, no node over its GPUs, CPU, memory or pods, a gang all or nothing, no
team past its limit counting fractions, the same snapshot gives the same plan.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler import forecast, plan
from gpuqueue.scheduler.engine import Cycle
from gpuqueue.scheduler.fragmentation import Shape, Workload
from gpuqueue.scheduler.model import (
    Node,
    PendingJob,
    PlacementStrategy,
    Plan,
    Policy,
    Quota,
    ReasonCode,
    RunningJob,
    Snapshot,
    Team,
)
from tests.scheduler.builders import CPU, GIB, HOUR, NOW, pending, running, team

H100 = "h100"
SHARED = frozenset({H100})


def frac(id: int, team: str, milli: int, *, workers: int = 1, **kw: object) -> PendingJob:
    """A pending job of `workers` workers each taking `milli` thousandths of one GPU."""
    job = pending(id, team, workers=workers, **kw)  # type: ignore[arg-type]
    return PendingJob(**{**_fields(job), "gpu_milli": milli})


def _fields(job: PendingJob) -> dict[str, object]:
    return {
        f: getattr(job, f)
        for f in PendingJob.__dataclass_fields__
        if PendingJob.__dataclass_fields__[f].init
    }


def frac_running(id: int, team: str, milli: int, devices: list[tuple[str, int]]) -> RunningJob:
    placement: dict[str, int] = {}
    for node, _ in devices:
        placement[node] = placement.get(node, 0) + 1
    job = running(id, team, placement)
    return RunningJob(
        **{
            f: getattr(job, f)
            for f in RunningJob.__dataclass_fields__
            if RunningJob.__dataclass_fields__[f].init
        }
        | {"gpu_milli": milli, "devices": tuple(sorted(devices))}
    )


def snap(
    nodes: tuple[Node, ...],
    jobs: tuple[PendingJob, ...],
    running_jobs: tuple[RunningJob, ...] = (),
    teams: tuple[Team, ...] = (team("a", limit=100),),
    shared: frozenset[str] = SHARED,
) -> Snapshot:
    return Snapshot(NOW, nodes, teams, running_jobs, jobs, shared_flavors=shared)


def gpu_node(name: str, gpus: int, model: str | None = None) -> Node:
    return Node(name, {H100: gpus}, model=model)


def by_id(result: Plan) -> tuple[dict[int, object], dict[int, object]]:
    return (
        {a.job_id: a for a in result.admissions},
        {p.job_id: p.reason for p in result.pending},
    )


# --- examples --------------------------------------------------------------------------------


def test_four_quarter_gpu_jobs_share_one_gpu_and_a_fifth_opens_another() -> None:
    result = plan(snap((gpu_node("n1", 2),), tuple(frac(i, "a", 250) for i in range(1, 6))))
    devices = {a.job_id: a.devices for a in result.admissions}
    assert devices == {1: (("n1", 0),), 2: (("n1", 0),), 3: (("n1", 0),), 4: (("n1", 0),)} | {
        5: (("n1", 1),)
    }
    assert all(a.placement == (("n1", 1),) for a in result.admissions)


def test_a_fraction_that_waits_is_forecast_to_start_when_a_sharer_of_its_gpu_ends() -> None:
    sharer = RunningJob(
        **{
            **{
                f: getattr(frac_running(10, "a", 500, [("n1", 0)]), f)
                for f in RunningJob.__dataclass_fields__
                if RunningJob.__dataclass_fields__[f].init
            },
            "expected_runtime": 2 * HOUR,
        }
    )
    jobs = (frac(1, "a", 500, max_runtime=4 * HOUR), frac(2, "a", 500, max_runtime=4 * HOUR))
    starts = forecast(snap((gpu_node("n1", 1),), jobs, (sharer,)))
    # Job 1 shares GPU 0 now; job 2 gets the sharer's half when it ends, an hour from now.
    assert starts == {1: NOW, 2: NOW + HOUR}


def test_a_fraction_goes_to_the_partly_used_gpu_with_least_room_left() -> None:
    held = (
        frac_running(10, "a", 300, [("n1", 0)]),
        frac_running(11, "a", 600, [("n2", 1)]),
    )
    result = plan(snap((gpu_node("n1", 2), gpu_node("n2", 2)), (frac(1, "a", 300),), held))
    assert result.admissions[0].devices == (("n2", 1),)


def test_whole_gpu_jobs_never_land_on_a_partly_used_gpu() -> None:
    held = (frac_running(10, "a", 100, [("n1", 0)]),)
    nodes = (gpu_node("n1", 2),)
    result = plan(snap(nodes, (pending(1, "a", gpus=2),), held))
    admitted, why = by_id(result)
    assert not admitted
    assert why[1].code is ReasonCode.NO_CAPACITY  # type: ignore[attr-defined]
    result = plan(snap(nodes, (pending(1, "a", gpus=1),), held))
    assert [a.job_id for a in result.admissions] == [1]


def test_a_whole_gpu_job_on_a_shared_flavor_still_takes_the_free_gpus() -> None:
    result = plan(snap((gpu_node("n1", 8),), (pending(1, "a", gpus=8),)))
    assert result.admissions[0].placement == (("n1", 1),)
    assert result.admissions[0].devices == ()


def test_a_fraction_of_a_flavor_that_does_not_share_never_fits() -> None:
    result = plan(snap((gpu_node("n1", 2),), (frac(1, "a", 500),), shared=frozenset()))
    reason = result.pending[0].reason
    assert reason.code is ReasonCode.NEVER_FITS
    assert reason.numbers["shared"] == 0 and reason.numbers["gpu_milli"] == 500


def test_a_fraction_that_fits_no_gpu_now_says_how_much_one_gpu_has_free() -> None:
    held = (frac_running(10, "a", 800, [("n1", 0)]), frac_running(11, "a", 700, [("n1", 1)]))
    result = plan(snap((gpu_node("n1", 2),), (frac(1, "a", 400),), held))
    reason = result.pending[0].reason
    assert reason.code is ReasonCode.NO_CAPACITY
    assert reason.numbers["gpu_milli"] == 400
    assert reason.numbers["most_gpu_room"] == 300
    assert reason.numbers["free"] == 0


def test_a_team_limit_counts_fractions_exactly() -> None:
    teams = (team("a", limit=1),)
    held = (frac_running(10, "a", 750, [("n1", 0)]),)
    nodes = (gpu_node("n1", 4),)
    result = plan(snap(nodes, (frac(1, "a", 500),), held, teams))
    reason = result.pending[0].reason
    assert reason.code is ReasonCode.OVER_LIMIT
    assert reason.numbers["in_use_milli"] == 750 and reason.numbers["requested_milli"] == 500
    result = plan(snap(nodes, (frac(1, "a", 250),), held, teams))
    assert [a.job_id for a in result.admissions] == [1]
    # A whole GPU on top of 0.75 is past a limit of 1: the rounded-up usage compares exactly.
    result = plan(snap(nodes, (pending(1, "a", gpus=1),), held, teams))
    assert result.pending[0].reason.code is ReasonCode.OVER_LIMIT


def test_a_gang_of_fractions_is_placed_whole_or_not_at_all() -> None:
    held = (frac_running(10, "a", 900, [("n1", 0)]),)
    result = plan(snap((gpu_node("n1", 2),), (frac(1, "a", 600, workers=2),), held))
    assert not result.admissions  # one worker fits on GPU 1, the other nowhere
    result = plan(snap((gpu_node("n1", 2),), (frac(1, "a", 500, workers=2),), held))
    assert result.admissions[0].devices == (("n1", 1), ("n1", 1))


def test_a_job_bound_to_a_model_goes_only_to_nodes_of_that_model() -> None:
    nodes = (gpu_node("n1", 8, "H100-SXM"), gpu_node("n2", 8, "A100-80GB"))
    job = PendingJob(**{**_fields(pending(1, "a", gpus=2)), "gpu_models": ("A100-80GB",)})
    result = plan(snap(nodes, (job,)))
    assert result.admissions[0].placement == (("n2", 1),)


def test_a_model_no_node_has_never_fits_and_the_reason_names_it() -> None:
    nodes = (gpu_node("n1", 8, "H100-SXM"),)
    job = PendingJob(**{**_fields(pending(1, "a", gpus=2)), "gpu_models": ("A100-80GB",)})
    reason = plan(snap(nodes, (job,))).pending[0].reason
    assert reason.code is ReasonCode.NEVER_FITS
    assert reason.numbers["gpu_models"] == "A100-80GB"
    assert reason.numbers["flavor_capacity"] == 0


def test_work_that_accepts_any_model_leaves_the_model_others_require() -> None:
    nodes = (gpu_node("n1", 8, "A100-80GB"), gpu_node("n2", 8, "H100-SXM"))
    bound = PendingJob(
        **{**_fields(pending(2, "a", gpus=8, submitted=NOW)), "gpu_models": ("A100-80GB",)}
    )
    for strategy in (PlacementStrategy.BINPACK, PlacementStrategy.SPREAD):
        result = plan(snap(nodes, (pending(1, "a", gpus=8), bound)), Policy(placement=strategy))
        placements = {a.job_id: a.placement for a in result.admissions}
        assert placements == {1: (("n2", 1),), 2: (("n1", 1),)}, strategy


def test_with_scarce_models_about_a_bin_packed_gang_still_goes_to_one_node_that_holds_it() -> None:
    nodes = (gpu_node("n1", 8, "H100-SXM"), gpu_node("n2", 8, "H100-SXM"), gpu_node("n3", 8, "L4"))
    held = (running(10, "a", {"n1": 1}, gpus=4),)
    bound = PendingJob(**{**_fields(pending(2, "a", gpus=1, submitted=NOW)), "gpu_models": ("L4",)})
    result = plan(snap(nodes, (pending(1, "a", workers=2, gpus=4), bound), held))
    placements = {a.job_id: a.placement for a in result.admissions}
    assert placements[1] == (("n2", 2),)  # whole on n2, not split over n1 and n2, nor on n3


def test_fragmentation_fills_a_partly_used_gpu_rather_than_opening_one_for_whole_gpu_work() -> None:
    held = (frac_running(10, "a", 500, [("n1", 0)]),)
    # The workload: mostly whole GPUs; the half-used GPU is lost to them until it is full.
    jobs = (frac(1, "a", 500),) + tuple(pending(i, "a", gpus=1, submitted=NOW) for i in (2, 3))
    result = plan(snap((gpu_node("n1", 4),), jobs, held), Policy(placement="fgd"))  # type: ignore[arg-type]
    devices = {a.job_id: a.devices for a in result.admissions}
    assert devices[1] == (("n1", 0),)


def test_fragmentation_keeps_room_the_workload_uses_where_bin_pack_fills_the_fullest_gpu() -> None:
    """GPU 0 has 500 free, GPU 1 700, and the workload is half-GPU tasks: 200 more on GPU 0
    would strand its last 300, on GPU 1 the 500 left still serve a task."""
    held = (frac_running(10, "a", 500, [("n1", 0)]), frac_running(11, "a", 300, [("n1", 1)]))
    snapshot = snap((gpu_node("n1", 2),), (frac(1, "a", 200),), held)
    workload = Workload([(Shape(0, 500, 0, 0), 1.0)])
    fgd = plan(snapshot, Policy(placement=PlacementStrategy.FRAGMENTATION, workload=workload))
    binpack = plan(snapshot, Policy(placement=PlacementStrategy.BINPACK))
    assert fgd.admissions[0].devices == (("n1", 1),)
    assert binpack.admissions[0].devices == (("n1", 0),)


def test_the_cpu_a_workload_asks_per_gpu_counts_its_cpu_only_tasks() -> None:
    """Half-GPU tasks of 4 CPUs and as many CPU-only tasks of 8 CPUs share the nodes' CPU:
    24 CPUs per GPU asked, not the 8 the GPU tasks ask alone."""
    workload = Workload([(Shape(0, 500, 4 * CPU, 0), 1.0), (Shape(0, 0, 8 * CPU, 0), 1.0)])
    assert workload.cpu_per_gpu == 24 * CPU


def half_gpu_on_two_nodes(n1_cpus: int, cpus: int) -> tuple[tuple[str, int], ...]:
    """The devices the fragmentation strategy gives a half GPU asking `cpus` CPUs, on two
    two-GPU nodes of `n1_cpus` and 40 CPUs, against a workload of half-GPU tasks of 4 CPUs."""
    nodes = (
        Node("n1", {H100: 2}, cpu=n1_cpus * CPU, memory=256 * GIB),
        Node("n2", {H100: 2}, cpu=40 * CPU, memory=256 * GIB),
    )
    job = PendingJob(**{**_fields(frac(1, "a", 500)), "cpu_per_worker": cpus * CPU})
    workload = Workload([(Shape(0, 500, 4 * CPU, 0), 1.0)])
    result = plan(
        snap(nodes, (job,)), Policy(placement=PlacementStrategy.FRAGMENTATION, workload=workload)
    )
    return result.admissions[0].devices


def test_fragmentation_sends_a_cpu_heavy_fraction_where_cpu_is_long() -> None:
    """Half-GPU tasks of 4 CPUs: 8 CPUs per GPU. A half asking 6 CPUs grows fragmentation on
    neither two-GPU node, but on n1, whose 16 CPUs just match its GPUs, it would leave 10 CPUs
    for 1.5 GPUs, and the last half GPU there strands for want of CPU; on n2, whose 40 CPUs
    are 24 more than its GPUs need, every GPU still finds CPU. (Judged by how far the CPU
    left strays after, n1 would look better: 2 CPUs short against 22 long.)"""
    assert half_gpu_on_two_nodes(n1_cpus=16, cpus=6) == (("n2", 0),)


def test_fragmentation_sends_a_cpu_light_fraction_where_cpu_is_short() -> None:
    """The same workload; a half asking 2 CPUs goes to n1, 4 CPUs short of its GPUs' 16, and
    leaves n2's 40 CPUs to work that asks more."""
    assert half_gpu_on_two_nodes(n1_cpus=12, cpus=2) == (("n1", 0),)


# --- invariants ------------------------------------------------------------------------------

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MODELS = ("A100", "H100")
MILLIS = (100, 250, 300, 500, 700, 900)


@st.composite
def shared_snapshots(draw: st.DrawFn) -> Snapshot:
    """1-3 nodes of 1, 2 or 4 GPUs of a model, some limiting CPU, memory or pods; running
    fractional and whole jobs that fit (GPU by GPU) and respect the quotas counted in
    thousandths; up to 8 pending jobs, whole or fractional, some bound to a model."""
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        limited = draw(st.booleans())
        nodes.append(
            Node(
                f"n{i}",
                {H100: draw(st.sampled_from([1, 2, 4]))},
                {H100: draw(st.sampled_from([0, 0, 1]))},
                draw(st.sampled_from([True, True, True, False])),
                cpu=draw(st.sampled_from([4, 16])) * CPU if limited else None,
                memory=64 * GIB if limited else None,
                pods=draw(st.integers(1, 6)) if limited else None,
                model=draw(st.sampled_from([*MODELS, None])),
            )
        )
    team_ids = ["a", "b"][: draw(st.integers(1, 2))]
    quotas = {t: Quota(g := draw(st.integers(0, 3)), g + draw(st.integers(0, 8))) for t in team_ids}
    teams = tuple(Team(t, {H100: quotas[t]}) for t in team_ids)
    used = {t: 0 for t in team_ids}  # thousandths
    firm = {t: 0 for t in team_ids}
    ids = itertools.count(100)
    running_jobs: list[RunningJob] = []
    for n in nodes:
        whole_free = n.capacity[H100] - n.used_externally[H100]
        gpus: dict[int, int] = {}
        left = [n.cpu or 1 << 62, n.memory or 1 << 62, n.pods or 1 << 62]
        for _ in range(draw(st.integers(0, 4))):
            t = draw(st.sampled_from(team_ids))
            cpu = draw(st.sampled_from([0, 2 * CPU]))
            memory = draw(st.sampled_from([0, 16 * GIB]))
            preemptible = draw(st.booleans())
            if cpu > left[0] or memory > left[1] or left[2] < 1:
                continue
            milli = draw(st.sampled_from((0, *MILLIS)))
            if milli:
                fitting = [i for i, u in gpus.items() if u + milli <= 1000]
                if fitting and draw(st.booleans()):
                    index = draw(st.sampled_from(fitting))
                elif whole_free >= 1:
                    index = draw(
                        st.sampled_from([i for i in range(n.capacity[H100]) if i not in gpus])
                    )
                    whole_free -= 1
                    gpus[index] = 0
                else:
                    continue
                ask = milli
            else:
                g = draw(st.sampled_from([1, 2]))
                if g > whole_free:
                    continue
                ask = 1000 * g
            if used[t] + ask > quotas[t].limit * 1000:
                if milli and gpus[index] == 0:
                    del gpus[index]
                    whole_free += 1
                continue
            if not preemptible and firm[t] + ask > quotas[t].guarantee * 1000:
                preemptible = True
            used[t] += ask
            if not preemptible:
                firm[t] += ask
            left = [left[0] - cpu, left[1] - memory, left[2] - 1]
            base = running(
                next(ids),
                t,
                {n.name: 1},
                gpus=1 if milli else g,
                preemptible=preemptible,
                cpu=cpu,
                memory=memory,
                started=NOW - draw(st.sampled_from([60.0, 2 * HOUR])),
            )
            if milli:
                gpus[index] += milli
                base = RunningJob(
                    **{
                        f: getattr(base, f)
                        for f in RunningJob.__dataclass_fields__
                        if RunningJob.__dataclass_fields__[f].init
                    }
                    | {"gpu_milli": milli, "devices": ((n.name, index),)}
                )
            else:
                whole_free -= g
            running_jobs.append(base)
    jobs = []
    for i in range(1, draw(st.integers(0, 8)) + 1):
        milli = draw(st.sampled_from((0, 0, *MILLIS)))
        base = pending(
            i,
            draw(st.sampled_from(team_ids)),
            workers=draw(st.integers(1, 3)),
            gpus=1 if milli else draw(st.sampled_from([1, 1, 2, 4])),
            preemptible=draw(st.booleans()),
            cpu=draw(st.sampled_from([0, 2 * CPU, 8 * CPU])),
            memory=draw(st.sampled_from([0, 16 * GIB])),
        )
        models = draw(st.sampled_from([(), (), ("A100",), ("H100",), MODELS]))
        jobs.append(PendingJob(**{**_fields(base), "gpu_milli": milli, "gpu_models": models}))
    shared = draw(st.sampled_from([SHARED, SHARED, frozenset()]))
    return Snapshot(NOW, tuple(nodes), teams, tuple(running_jobs), tuple(jobs), None, shared)


@SETTINGS
@given(shared_snapshots(), st.sampled_from(list(PlacementStrategy)), st.booleans())
def test_shared_plans_keep_every_gpu_node_and_team_within_bounds(
    snapshot: Snapshot, strategy: PlacementStrategy, preemption: bool
) -> None:
    policy = Policy(placement=strategy, preemption=preemption, reclaim=preemption)
    result = plan(snapshot, policy)
    assert result == plan(snapshot, policy)
    assert result == Cycle(snapshot, policy, memo=False).run()
    jobs = {j.id: j for j in snapshot.pending}
    nodes = {n.name: n for n in snapshot.nodes}
    assert sorted([a.job_id for a in result.admissions] + [p.job_id for p in result.pending]) == (
        sorted(jobs)
    )
    shared = snapshot.shared_flavors
    victims = {p.job_id for p in result.preemptions}
    whole: dict[str, int] = {}  # node -> whole GPUs held
    on_gpu: dict[tuple[str, int], int] = {}  # (node, index) -> thousandths
    asked: dict[str, list[int]] = {}
    held: dict[str, int] = {}  # team -> thousandths held after the plan
    firm: dict[str, int] = {}

    Pairs = tuple[tuple[str, int], ...]

    def hold(job: RunningJob | PendingJob, placement: Pairs, devices: Pairs, counts: bool) -> None:
        fractional = job.gpu_milli and H100 in shared
        for n, w in placement:
            room = asked.setdefault(n, [0, 0, 0])
            room[0] += w * job.cpu_per_worker
            room[1] += w * job.memory_per_worker
            room[2] += w
            if not fractional:
                whole[n] = whole.get(n, 0) + w * job.gpus_per_worker
        if fractional:
            for device in devices:
                on_gpu[device] = on_gpu.get(device, 0) + job.gpu_milli
        if counts:
            ask = job.workers * (job.gpu_milli or 1000 * job.gpus_per_worker)
            held[job.team] = held.get(job.team, 0) + ask
            if not job.preemptible:
                firm[job.team] = firm.get(job.team, 0) + ask

    for r in snapshot.running:
        hold(r, r.placement, r.devices, r.id not in victims)
    for a in result.admissions:
        job = jobs[a.job_id]
        # A gang whole, on schedulable nodes of the models it accepts, a device per fraction.
        assert sum(w for _, w in a.placement) == job.workers
        assert all(nodes[n].schedulable for n, _ in a.placement)
        if job.gpu_models:
            assert all(nodes[n].model in job.gpu_models for n, _ in a.placement)
        if job.gpu_milli:
            assert job.flavor in shared
            assert len(a.devices) == job.workers
            per_node: dict[str, int] = {}
            for n, _ in a.devices:
                per_node[n] = per_node.get(n, 0) + 1
            assert tuple(sorted(per_node.items())) == a.placement
        else:
            assert a.devices == ()
        hold(job, a.placement, a.devices, True)
    # No GPU above 1000 thousandths, no node over its GPUs (whole ones plus those opened).
    for (n, index), milli in on_gpu.items():
        assert milli <= 1000, (n, index, milli)
        assert 0 <= index < nodes[n].capacity[H100]
    # (Where the plan puts work: a snapshot whose flavor does not share may list fractions that
    # share a GPU, which the engine counts as a whole GPU each.)
    for n in {n for a in result.admissions for n, _ in a.placement}:
        node = nodes[n]
        opened = len({i for (m, i) in on_gpu if m == n})
        assert whole.get(n, 0) + opened <= node.capacity[H100] - node.used_externally[H100], n
    # No node over its CPU, memory or pods where a plan puts a worker.
    for a in result.admissions:
        for n, _ in a.placement:
            node = nodes[n]
            limits = (node.cpu, node.memory, node.pods)
            for total, limit in zip(asked[n], limits, strict=True):
                assert limit is None or total <= limit
    # No team past its limit or its guarantee (non-preemptible), counting fractions.
    quotas = {t.id: t.quotas[H100] for t in snapshot.teams}
    for t, milli in held.items():
        assert milli <= quotas[t].limit * 1000, (t, milli)
    for t, milli in firm.items():
        assert milli <= quotas[t].guarantee * 1000, (t, milli)
