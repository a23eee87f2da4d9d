"""Invariants over generated snapshots (Hypothesis).

No node over-allocated (GPUs, and CPU, memory and pods where a node limits them); every gang all or
nothing; no team (or department) past its limit; non-preemptible work within the guarantee; a team
under its guarantee that could get room by reclaiming borrowed GPUs is never left simply waiting,
whatever the size of the borrower's jobs; a preemption is withdrawn only before its deadline and
never while a job waits for it alone; the GPUs of a job being preempted for a pending job are
claimed by no job decided before it; the same snapshot gives the same plan whatever the order of
its pending or running jobs; applying a plan and planning again never preempts what was just
admitted; a job that no state admits stays pending for a reason that says so.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler import forecast, plan
from gpuqueue.scheduler.engine import Cycle
from gpuqueue.scheduler.model import (
    Node,
    NodeAsk,
    PendingJob,
    Placement,
    PlacementStrategy,
    Plan,
    Policy,
    Quota,
    ReasonCode,
    RunningJob,
    Snapshot,
    Team,
    node_asks,
)
from gpuqueue.scheduler.never import never_admitted
from tests.scheduler.builders import CPU, GIB, HOUR, NOW

FLAVOR = "h100"
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    return Policy(
        placement=draw(st.sampled_from(list(PlacementStrategy))),
        min_runtime_seconds=draw(st.sampled_from([0.0, 300.0])),
        starvation_seconds=draw(st.sampled_from([600.0, 3600.0])),
        preemption=draw(st.booleans()),
        reclaim=draw(st.booleans()),
    )


# A worker's CPU (millicores) and memory (bytes): none, or small to a whole node's.
REQUESTS = st.tuples(
    st.sampled_from([0, 0, 2 * CPU, 8 * CPU, 16 * CPU]),
    st.sampled_from([0, 0, 16 * GIB, 128 * GIB]),
)
BIG = 1 << 62


def _room(node: Node) -> tuple[int, int, int]:
    """CPU, memory and pods that others leave on a node (BIG where it does not limit)."""
    return (
        BIG if node.cpu is None else node.cpu - node.cpu_used_externally,
        BIG if node.memory is None else node.memory - node.memory_used_externally,
        BIG if node.pods is None else node.pods - node.pods_used_externally,
    )


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    """1-4 nodes of 4, 6 or 8 GPUs (6: workers of 4 or 8 leave GPUs over, and the GPUs of a
    gang can add up where its workers do not fit; some also limit CPU, memory or pods, partly
    requested by others), 1-3 teams (maybe in a department), running jobs that fit the nodes
    and respect every quota, and up to 7 pending jobs (some asking CPU and memory)."""
    nodes = []
    for i in range(draw(st.integers(1, 4))):
        capacity = draw(st.sampled_from([4, 6, 8]))
        external = draw(st.sampled_from([0, 0, 0, 1, 2]))
        schedulable = draw(st.sampled_from([True, True, True, False]))
        limit = draw(st.sampled_from(["", "", "cpu", "memory", "pods", "all"]))
        cpu = draw(st.sampled_from([8, 16, 32])) * CPU if limit in ("cpu", "all") else None
        memory = draw(st.sampled_from([64, 256])) * GIB if limit in ("memory", "all") else None
        pods = draw(st.integers(1, 4)) if limit in ("pods", "all") else None
        nodes.append(
            Node(
                f"n{i}",
                {FLAVOR: capacity},
                {FLAVOR: external},
                schedulable,
                cpu=cpu,
                memory=memory,
                pods=pods,
                cpu_used_externally=draw(st.sampled_from([0, 0, 4 * CPU])) if cpu else 0,
                memory_used_externally=draw(st.sampled_from([0, 32 * GIB])) if memory else 0,
                pods_used_externally=draw(st.sampled_from([0, 0, 1])) if pods else 0,
            )
        )
    total = sum(n.capacity[FLAVOR] - n.used_externally[FLAVOR] for n in nodes if n.schedulable)
    team_ids = ["a", "b", "c"][: draw(st.integers(1, 3))]
    in_department = draw(st.booleans()) and len(team_ids) > 1
    teams = []
    quotas: dict[str, Quota] = {}
    left = total
    for t in team_ids:
        guarantee = draw(st.integers(0, max(left, 0)))
        left -= guarantee
        quota = Quota(
            guarantee, guarantee + draw(st.integers(0, 16)), draw(st.sampled_from([1.0, 2.0]))
        )
        quotas[t] = quota
        teams.append(Team(t, {FLAVOR: quota}, "d" if in_department and t != "c" else None))
    if in_department:
        members = [t for t in team_ids if t != "c"]
        guarantee = sum(quotas[t].guarantee for t in members)
        dept = Quota(guarantee, guarantee + draw(st.integers(0, 16)))
        quotas["d"] = dept
        teams.append(Team("d", {FLAVOR: dept}))

    def chain(team: str) -> list[str]:
        return [team, "d"] if in_department and team != "c" else [team]

    used = {k: 0 for k in quotas}
    firm = {k: 0 for k in quotas}
    running: list[RunningJob] = []
    job_id = itertools.count(100)
    for n in nodes:
        free = n.capacity[FLAVOR] - n.used_externally[FLAVOR]
        left = list(_room(n))
        for _ in range(draw(st.integers(0, 3))):
            gpus = draw(st.sampled_from([1, 2, 4]))
            workers = draw(st.integers(1, 2))
            team = draw(st.sampled_from(team_ids))
            cpu, memory = draw(REQUESTS)
            need = gpus * workers
            ask = (cpu * workers, memory * workers, workers)
            # Or a gang of pods of different asks: its GPUs counted one by one, its room given.
            pods = draw(st.sampled_from([(), (), (), ((2, cpu, memory), (1, 0, 0))]))
            if pods:
                gpus, workers, need = 1, 3, 3
                ask = (cpu, memory, 2)
            if need > free or any(used[g] + need > quotas[g].limit for g in chain(team)):
                continue
            if any(a > room for a, room in zip(ask, left, strict=True)):
                continue
            left = [room - a for room, a in zip(left, ask, strict=True)]
            preemptible = draw(st.booleans()) or any(
                firm[g] + need > quotas[g].guarantee for g in chain(team)
            )
            for g in chain(team):
                used[g] += need
                if not preemptible:
                    firm[g] += need
            free -= need
            running.append(
                RunningJob(
                    id=next(job_id),
                    team=team,
                    user=draw(st.sampled_from(["u1", "u2"])),
                    flavor=FLAVOR,
                    gpus_per_worker=gpus,
                    placement=((n.name, workers),),
                    priority=draw(st.integers(0, 2)),
                    preemptible=preemptible,
                    started_at=NOW - draw(st.sampled_from([60.0, HOUR, 2 * HOUR])),
                    max_runtime=draw(st.sampled_from([None, 2 * HOUR, 3 * HOUR])),
                    preempting_since=(since := draw(st.sampled_from([None, None, None, NOW - 5]))),
                    checkpoint_grace=draw(st.sampled_from([None, 1.0, 600.0])),
                    # The job it is preempted for: pending (1-7), gone (99), none (a drain).
                    preempted_for=None
                    if since is None
                    else draw(st.sampled_from([None, 1, 5, 99])),
                    cpu_per_worker=cpu,
                    memory_per_worker=memory,
                    rooms=((n.name, *ask),) if pods else (),
                )
            )
    pending = [_pending(draw, i, team_ids) for i in range(1, draw(st.integers(0, 7)) + 1)]
    # Time-based fair share (usage.py): no history, or a balance per team from deep in debt to
    # owed, so that every invariant is also checked with the rules that read it.
    balance = draw(
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    (t, FLAVOR): st.sampled_from([-16 * HOUR, -HOUR, -1.0, 0.0, 2 * HOUR])
                    for t in team_ids
                }
            ),
        )
    )
    return Snapshot(
        NOW, tuple(nodes), tuple(teams), tuple(running), tuple(pending), share_balance=balance
    )


def _pending(draw: st.DrawFn, i: int, team_ids: list[str]) -> PendingJob:
    """A gang of 1-3 workers alike, or (one in four) of 2-3 pods of different asks."""
    workers = draw(st.integers(1, 3))
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    cpu, memory = draw(REQUESTS)
    pods: tuple[tuple[int, int, int], ...] = ()
    if draw(st.integers(0, 3)) == 0:
        pods = tuple(
            (draw(st.sampled_from([1, 2, 4, 8])), *draw(REQUESTS))
            for _ in range(draw(st.integers(2, 3)))
        )
        workers = len(pods)
        gpus, cpu, memory = (max(p[k] for p in pods) for k in range(3))
    return PendingJob(
        id=i,
        team=draw(st.sampled_from(team_ids)),
        user=draw(st.sampled_from(["u1", "u2"])),
        flavor=FLAVOR,
        workers=workers,
        gpus_per_worker=gpus,
        priority=draw(st.integers(0, 2)),
        preemptible=draw(st.booleans()),
        submitted_at=NOW - draw(st.sampled_from([10.0, 1000.0, 2 * HOUR])),
        max_runtime=draw(st.sampled_from([None, 300.0, 2 * HOUR])),
        # Predicted: without a max runtime a job may backfill by it (starvation.py).
        expected_runtime=draw(st.sampled_from([None, 300.0, 1000.0, 2 * HOUR])),
        cpu_per_worker=cpu,
        memory_per_worker=memory,
        pods=pods,
    )


def _takes(
    job: PendingJob | RunningJob, placement: Placement, pods: tuple[str, ...] = ()
) -> list[NodeAsk]:
    """What a job takes on each node of its placement: a gang of pods of different asks each
    pod's own on its node (`pods`), any other its workers'."""
    if isinstance(job, PendingJob) and job.pods:
        return node_asks(pods, job.pods)
    if isinstance(job, RunningJob):
        return [(n, w * job.gpus_per_worker, job.room_on(n, w)) for n, w in placement]
    return [
        (n, w * job.gpus_per_worker, (w * job.cpu_per_worker, w * job.memory_per_worker, w))
        for n, w in placement
    ]


def _held_after(snapshot: Snapshot, result: Plan) -> tuple[dict[str, int], dict[str, int]]:
    """GPUs per group that stay held or are admitted (leaving jobs excluded), and the
    non-preemptible part of them."""
    parents = {t.id: t.parent for t in snapshot.teams}
    victims = {p.job_id for p in result.preemptions}
    jobs = {j.id: j for j in snapshot.pending}
    held: dict[str, int] = {}
    firm: dict[str, int] = {}
    items: list[tuple[str, int, bool]] = [
        (r.team, r.gpus, r.preemptible)
        for r in snapshot.running
        if r.preempting_since is None and r.id not in victims
    ]
    items += [
        (jobs[a.job_id].team, jobs[a.job_id].gpus, jobs[a.job_id].preemptible)
        for a in result.admissions
    ]
    for team, gpus, preemptible in items:
        for group in (team, parents.get(team)):
            if group is None:
                continue
            held[group] = held.get(group, 0) + gpus
            if not preemptible:
                firm[group] = firm.get(group, 0) + gpus
    return held, firm


@SETTINGS
@given(snapshots(), policies())
def test_every_plan_keeps_the_invariants(snapshot: Snapshot, policy: Policy) -> None:
    result = plan(snapshot, policy)
    jobs = {j.id: j for j in snapshot.pending}
    nodes = {n.name: n for n in snapshot.nodes}
    running = {r.id: r for r in snapshot.running}
    admitted = [a.job_id for a in result.admissions]
    waiting = [p.job_id for p in result.pending]
    # Every pending job is decided exactly once.
    assert sorted(admitted + waiting) == sorted(jobs)
    # Every gang is placed whole, on schedulable nodes of its flavor.
    for a in result.admissions:
        job = jobs[a.job_id]
        assert sum(w for _, w in a.placement) == job.workers
        assert list(a.placement) == sorted(a.placement)
        assert all(nodes[n].schedulable and w > 0 for n, w in a.placement)
        # Each pod of a gang of different asks on a node of the placement, all of them.
        assert len(a.pods) == len(job.pods)
        if job.pods:
            assert sorted(a.pods) == [n for n, w in a.placement for _ in range(w)]
    # No node over-allocated: running (leaving included) plus admitted fit the capacity; a
    # gang of pods of different asks holds each pod's own GPUs.
    takes = [_takes(r, r.placement) for r in snapshot.running]
    takes += [_takes(jobs[a.job_id], a.placement, a.pods) for a in result.admissions]
    load: dict[str, int] = {}
    for per_node in takes:
        for n, gpus, _ in per_node:
            load[n] = load.get(n, 0) + gpus
    for n, gpus in load.items():
        node = nodes[n]
        assert gpus <= node.capacity[FLAVOR] - node.used_externally[FLAVOR]
    # Nor in CPU, memory or pods where a node limits them: where a plan puts a worker, every
    # worker there fits what others leave.
    asked: dict[str, list[int]] = {}
    for per_node in takes:
        for n, _, room in per_node:
            total = asked.setdefault(n, [0, 0, 0])
            for k in range(3):
                total[k] += room[k]
    for a in result.admissions:
        for n, _ in a.placement:
            assert all(x <= room for x, room in zip(asked[n], _room(nodes[n]), strict=True)), n
    # No team or department past its limit; non-preemptible work within the guarantee.
    quotas = {t.id: t.quotas[FLAVOR] for t in snapshot.teams}
    held, firm = _held_after(snapshot, result)
    for group, gpus in held.items():
        assert gpus <= quotas[group].limit, (group, gpus)
    for group, gpus in firm.items():
        assert gpus <= quotas[group].guarantee, (group, gpus)
    # Victims are preemptible jobs out of their minimum runtime, each preempted once.
    victims = [p.job_id for p in result.preemptions]
    assert len(victims) == len(set(victims))
    for v in victims:
        job = running[v]
        assert job.preemptible and job.preempting_since is None
        assert job.started_at + policy.min_runtime_seconds <= NOW
    # Withdrawn: jobs being preempted for a job, before their deadline, that no waiting job
    # names as all it waits for.
    for w in result.withdrawals:
        job = running[w]
        assert job.preempted_for is not None and job.preempting_since is not None
        assert job.checkpoint_grace is None or job.preempting_since + job.checkpoint_grace > NOW
    for p in result.pending:
        if p.reason.code is ReasonCode.WAITING_FOR_PREEMPTION and len(p.reason.job_ids) == 1:
            assert p.reason.job_ids[0] not in result.withdrawals
    _assert_promises_kept(snapshot, result)
    # The same snapshot gives the same plan.
    assert plan(snapshot, policy) == result


def _assert_promises_kept(snapshot: Snapshot, result: Plan) -> None:
    """Promised GPUs are never planned for another job: the GPUs of a job being preempted for
    a pending job are claimed by no job decided before that job (the positions count the jobs
    left pending in the order they were decided)."""
    promised = {r.id: r.preempted_for for r in snapshot.running if r.preempting_since is not None}
    decided = {p.job_id: p.cluster_position for p in result.pending}
    for p in result.pending:
        if p.reason.code is not ReasonCode.WAITING_FOR_PREEMPTION:
            continue
        for victim in p.reason.job_ids:
            preemptor = promised.get(victim)
            if preemptor in decided and preemptor != p.job_id:
                assert decided[preemptor] < p.cluster_position, (victim, preemptor, p)


@st.composite
def promises(draw: st.DrawFn) -> Snapshot:
    """Full 8-GPU nodes whose jobs are often being preempted for one of the pending jobs (or
    for a job gone, or for none), and pending jobs of three teams that come before or after
    those in the order (older, of higher priority, of a team further below its share)."""
    nodes = tuple(Node(f"n{i}", {FLAVOR: 8}) for i in range(draw(st.integers(1, 3))))
    team_ids = ["a", "b", "c"]
    teams = tuple(
        Team(t, {FLAVOR: Quota(draw(st.sampled_from([0, 4, 8])), 8 * len(nodes))}) for t in team_ids
    )
    count = draw(st.integers(1, 5))
    running = []
    job_id = itertools.count(100)
    for n in nodes:
        left = 8
        while left:
            g = draw(st.sampled_from([g for g in (2, 4, 8) if g <= left]))
            left -= g
            leaving = draw(st.booleans())
            running.append(
                RunningJob(
                    id=next(job_id),
                    team=draw(st.sampled_from(team_ids)),
                    user="u",
                    flavor=FLAVOR,
                    gpus_per_worker=g,
                    placement=((n.name, 1),),
                    priority=draw(st.integers(0, 2)),
                    preemptible=True,
                    started_at=NOW - draw(st.sampled_from([600.0, 5 * HOUR])),
                    preempting_since=NOW - draw(st.sampled_from([5.0, 700.0])) if leaving else None,
                    checkpoint_grace=600.0,
                    preempted_for=draw(st.sampled_from([*range(1, count + 1), 99, None]))
                    if leaving
                    else None,
                )
            )
    pending = tuple(
        PendingJob(
            id=i,
            team=draw(st.sampled_from(team_ids)),
            user="u",
            flavor=FLAVOR,
            workers=draw(st.integers(1, 2)),
            gpus_per_worker=draw(st.sampled_from([2, 4, 8])),
            priority=draw(st.integers(0, 2)),
            preemptible=True,
            submitted_at=NOW - draw(st.sampled_from([10.0, 1000.0, 2 * HOUR])),
        )
        for i in range(1, count + 1)
    )
    return Snapshot(NOW, nodes, teams, tuple(running), pending)


@SETTINGS
@given(promises(), policies())
def test_the_gpus_of_a_job_being_preempted_are_claimed_by_no_job_before_its_preemptor(
    snapshot: Snapshot, policy: Policy
) -> None:
    _assert_promises_kept(snapshot, plan(snapshot, policy))


@pytest.mark.parametrize("jobs", ["pending", "running"])
@SETTINGS
@given(snapshots(), policies(), st.randoms(use_true_random=False))
def test_the_order_of_the_jobs_in_the_snapshot_changes_nothing(
    jobs: str, snapshot: Snapshot, policy: Policy, rng: random.Random
) -> None:
    # The service lists running jobs by id, the replay by start: neither order may decide
    # which of two equally free nodes a gang gets.
    shuffled = list(getattr(snapshot, jobs))
    rng.shuffle(shuffled)
    assert plan(replace(snapshot, **{jobs: tuple(shuffled)}), policy) == plan(snapshot, policy)


@SETTINGS
@given(snapshots(), policies())
def test_a_job_never_admitted_stays_pending_even_alone_on_an_empty_cluster(
    snapshot: Snapshot, policy: Policy
) -> None:
    never = never_admitted(snapshot)
    empty = replace(snapshot, running=(), share_balance=None)
    for job in snapshot.pending:
        if job.id not in never:
            continue
        result = plan(replace(empty, pending=(job,)), policy)
        assert not result.admissions
        assert result.pending[0].reason.code in {
            ReasonCode.NEVER_FITS,
            ReasonCode.NO_QUOTA,
            ReasonCode.OVER_LIMIT,
            ReasonCode.OVER_FAIR_SHARE,
        }
    starts = forecast(snapshot, policy)
    assert all(starts[job_id] is None for job_id in never)


@SETTINGS
@given(snapshots())
def test_the_engine_tells_the_jobs_that_never_start_as_the_snapshot_does(
    snapshot: Snapshot,
) -> None:
    # The engine builds the test from its ledger and quotas, the forecast from the snapshot.
    cycle = Cycle(snapshot, Policy())
    assert {job.id for job in snapshot.pending if cycle.never(job)} == never_admitted(snapshot)


@SETTINGS
@given(snapshots(), policies())
def test_with_every_runtime_known_every_job_that_can_start_gets_a_forecast(
    snapshot: Snapshot, policy: Policy
) -> None:
    """No job is left waiting for ever in the forecast (no preemption loop, no overdue job
    holding its GPUs, no team in debt waiting for ever: its debt decays in the forecast as it
    would), once GPUs held outside gpuqueue are gone: those may never come back."""
    known = replace(
        snapshot,
        nodes=tuple(
            replace(
                node,
                used_externally={},
                cpu_used_externally=0,
                memory_used_externally=0,
                pods_used_externally=0,
            )
            for node in snapshot.nodes
        ),
        running=tuple(replace(job, expected_runtime=HOUR) for job in snapshot.running),
        pending=tuple(replace(job, expected_runtime=HOUR) for job in snapshot.pending),
    )
    starts = forecast(known, policy, max_steps=400)
    never = never_admitted(known)
    for job in known.pending:
        if job.id not in never:
            assert starts[job.id] is not None, job


def test_of_two_equally_free_nodes_a_gang_gets_the_same_whatever_the_running_order() -> None:
    # The case the property above finds only in a few thousand examples.
    nodes = (Node("n0", {FLAVOR: 8}), Node("n1", {FLAVOR: 8}))
    running = tuple(
        RunningJob(
            id=job_id,
            team="a",
            user="u1",
            flavor=FLAVOR,
            gpus_per_worker=4,
            placement=((node, 1),),
            priority=0,
            preemptible=True,
            started_at=NOW - HOUR,
        )
        for job_id, node in ((100, "n0"), (101, "n1"))
    )
    job = PendingJob(
        id=1,
        team="a",
        user="u1",
        flavor=FLAVOR,
        workers=1,
        gpus_per_worker=4,
        priority=0,
        preemptible=True,
        submitted_at=NOW - 60,
    )
    snapshot = Snapshot(
        now=NOW,
        nodes=nodes,
        teams=(Team("a", {FLAVOR: Quota(16, 16)}),),
        running=running,
        pending=(job,),
    )
    placements = {
        plan(replace(snapshot, running=order)).admissions[0].placement
        for order in (running, running[::-1])
    }
    assert placements == {(("n0", 1),)}


@SETTINGS
@given(snapshots(), policies())
def test_planning_again_never_preempts_what_was_just_admitted(
    snapshot: Snapshot, policy: Policy
) -> None:
    # What protects a just-admitted job is its minimum runtime: with none at all, a starving
    # low-priority job admitted this cycle may rightly yield to its team's higher-priority job
    # in the next. So the property is checked with any positive minimum.
    policy = replace(policy, min_runtime_seconds=max(policy.min_runtime_seconds, 1.0))
    result = plan(snapshot, policy)
    jobs = {j.id: j for j in snapshot.pending}
    victims = {p.job_id for p in result.preemptions}
    admitted = {a.job_id for a in result.admissions}
    started = tuple(
        RunningJob(
            id=j.id,
            team=j.team,
            user=j.user,
            flavor=j.flavor,
            gpus_per_worker=j.gpus_per_worker,
            placement=a.placement,
            priority=j.priority,
            preemptible=j.preemptible,
            started_at=NOW,
            max_runtime=j.max_runtime,
        )
        for a in result.admissions
        for j in [jobs[a.job_id]]
    )
    after = replace(
        snapshot,
        running=tuple(
            replace(r, preempting_since=NOW) if r.id in victims else r for r in snapshot.running
        )
        + started,
        pending=tuple(j for j in snapshot.pending if j.id not in admitted),
    )
    again = plan(after, policy)
    assert not {p.job_id for p in again.preemptions} & admitted


@SETTINGS
@given(snapshots(), policies())
def test_forecasts_are_never_before_now(snapshot: Snapshot, policy: Policy) -> None:
    starts = forecast(snapshot, policy, max_steps=20)
    assert set(starts) == {j.id for j in snapshot.pending}
    admitted = {a.job_id for a in plan(snapshot, policy).admissions}
    for job_id, start in starts.items():
        assert start is None or start >= NOW
        if job_id in admitted:
            assert start == NOW


@st.composite
def grabs(draw: st.DrawFn) -> Snapshot:
    """Team hog holds single-GPU borrowed jobs; team b, under its guarantee, asks for a gang."""
    nodes = tuple(Node(f"n{i}", {FLAVOR: 8}) for i in range(draw(st.integers(1, 3))))
    capacity = 8 * len(nodes)
    running = []
    job_id = itertools.count(100)
    for n in nodes:
        for _ in range(draw(st.integers(0, 8))):
            running.append(
                RunningJob(
                    id=next(job_id),
                    team="hog",
                    user="h",
                    flavor=FLAVOR,
                    gpus_per_worker=1,
                    placement=((n.name, 1),),
                    priority=draw(st.integers(0, 1)),
                    preemptible=True,
                    started_at=NOW - draw(st.integers(600, 7200)),
                )
            )
    guarantee = draw(st.integers(1, capacity))
    gpus = draw(st.sampled_from([g for g in (1, 2, 4, 8) if g <= guarantee]))
    workers = draw(st.integers(1, max(1, guarantee // gpus)))
    teams = (
        Team("hog", {FLAVOR: Quota(0, capacity)}),
        Team("b", {FLAVOR: Quota(guarantee, capacity)}),
    )
    job = PendingJob(1, "b", "u", FLAVOR, workers, gpus, 0, draw(st.booleans()), NOW - 10)
    return Snapshot(NOW, nodes, teams, tuple(running), (job,))


@SETTINGS
@given(grabs())
def test_a_team_under_its_guarantee_is_never_left_waiting_when_reclaim_makes_room(
    snapshot: Snapshot,
) -> None:
    result = plan(snapshot)
    job = snapshot.pending[0]
    share = result.fair_shares[("hog", FLAVOR)]
    surplus = sum(r.gpus for r in snapshot.running) - share
    per_node = {n.name: 0 for n in snapshot.nodes}
    for r in snapshot.running:
        per_node[r.placement[0][0]] += 1
    names = sorted(per_node)
    feasible = any(
        sum(taken) <= surplus
        and sum(
            (8 - per_node[n] + c) // job.gpus_per_worker for n, c in zip(names, taken, strict=True)
        )
        >= job.workers
        for taken in itertools.product(*(range(per_node[n] + 1) for n in names))
    )
    served = {a.job_id for a in result.admissions} | {p.for_job_id for p in result.preemptions}
    if feasible:
        assert job.id in served


@st.composite
def borrowed_gangs(draw: st.DrawFn) -> Snapshot:
    """Team b, under its guarantee, holds a few GPUs and asks for a gang within the guarantee;
    team hog (no guarantee) borrows the rest in gangs of 1-3 workers of 1-8 GPUs, some not
    preemptible, some inside their minimum runtime: its jobs may be bigger than b's need."""
    nodes = tuple(Node(f"n{i}", {FLAVOR: 8}) for i in range(draw(st.integers(1, 4))))
    capacity = 8 * len(nodes)
    free = {n.name: 8 for n in nodes}
    running = []
    job_id = itertools.count(100)
    guarantee = draw(st.integers(1, capacity))
    held = 0
    for _ in range(draw(st.integers(0, 12))):
        team = draw(st.sampled_from(["hog", "hog", "b"]))
        g = draw(st.sampled_from([1, 2, 4, 8]))
        workers = draw(st.integers(1, 3 if team == "hog" else 1))
        if team == "b" and held + g > guarantee:
            continue
        placement: dict[str, int] = {}
        for name in sorted(free):
            while free[name] >= g and sum(placement.values()) < workers:
                free[name] -= g
                placement[name] = placement.get(name, 0) + 1
        if sum(placement.values()) < workers:
            for name, count in placement.items():
                free[name] += count * g
            continue
        held += g if team == "b" else 0
        running.append(
            RunningJob(
                id=next(job_id),
                team=team,
                user=team,
                flavor=FLAVOR,
                gpus_per_worker=g,
                placement=tuple(sorted(placement.items())),
                priority=0,
                preemptible=team == "b" or draw(st.integers(0, 3)) > 0,
                started_at=NOW - draw(st.sampled_from([100, 600, 7200, 20000])),
            )
        )
    room = guarantee - held
    gpus = draw(st.sampled_from([g for g in (1, 2, 4, 8) if g <= max(room, 1)]))
    workers = draw(st.integers(1, max(1, room // gpus)))
    teams = (
        Team("hog", {FLAVOR: Quota(0, capacity)}),
        Team("b", {FLAVOR: Quota(guarantee, capacity)}),
    )
    job = PendingJob(1, "b", "u", FLAVOR, workers, gpus, 0, True, NOW - 10)
    return Snapshot(NOW, nodes, teams, tuple(running), (job,))


@SETTINGS
@given(borrowed_gangs())
def test_a_guarantee_is_reclaimed_from_a_borrower_whatever_the_size_of_its_jobs(
    snapshot: Snapshot,
) -> None:
    """A team under its guarantee whose pending job fits within it is never left waiting while
    a borrower (a team with no guarantee) holds preemptible GPUs out of their minimum runtime
    that would make room: its fair share does not shield the borrower, however much bigger
    than the need its jobs are. (Stated for borrowers without a guarantee: a victim team with
    one keeps it, and which of its jobs to take is then a choice the search makes greedily.)"""
    policy = Policy()
    job = snapshot.pending[0]
    held = sum(r.gpus for r in snapshot.running if r.team == "b")
    if held + job.gpus > snapshot.teams[1].quotas[FLAVOR].guarantee:
        return
    stays = {n.name: 8 for n in snapshot.nodes}
    for r in snapshot.running:
        takeable = (
            r.team == "hog" and r.preemptible and r.started_at + policy.min_runtime_seconds <= NOW
        )
        if not takeable:
            for name, count in r.placement:
                stays[name] -= count * r.gpus_per_worker
    feasible = sum(left // job.gpus_per_worker for left in stays.values()) >= job.workers
    result = plan(snapshot, policy)
    served = {a.job_id for a in result.admissions} | {p.for_job_id for p in result.preemptions}
    if feasible:
        assert job.id in served, result.pending
    # What is taken is needed: without any one victim the gang would not fit.
    victims = {p.job_id for p in result.preemptions}
    running = {r.id: r for r in snapshot.running}
    for v in victims:
        free = {n.name: 8 for n in snapshot.nodes}
        for r in snapshot.running:
            if r.id not in victims or r.id == v:
                for name, count in r.placement:
                    free[name] -= count * r.gpus_per_worker
        assert sum(f // job.gpus_per_worker for f in free.values()) < job.workers, running[v]
