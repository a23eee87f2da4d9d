"""Topology levels (topology.py): a gang inside one domain of a level, required or preferred.

The cluster of most cases: two blocks (b1, b2), racks r1-r2 in b1 and r3 in b2, nodes of 8
GPUs labelled with both, as a fabric's block and rack labels would be.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.engine import Cycle
from gpuqueue.scheduler.horizon import AT_ONCE
from gpuqueue.scheduler.model import (
    Node,
    PendingJob,
    PlacementStrategy,
    Plan,
    Policy,
    ReasonCode,
    RunningJob,
    Snapshot,
)
from tests.scheduler import test_properties
from tests.scheduler.builders import NOW, pending, running, team

BLOCK = "example.com/block"
RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
LEVELS = {"h100": (BLOCK, RACK, HOST)}


def rack_node(name: str, block: str, rack: str, gpus: int = 8) -> Node:
    return Node(name, {"h100": gpus}, labels={BLOCK: block, RACK: rack})


def cluster(per_rack: dict[str, tuple[str, int]]) -> tuple[Node, ...]:
    """{"r1": ("b1", 3)}: rack r1 of block b1 with nodes r1-n1..r1-n3."""
    return tuple(
        rack_node(f"{rack}-n{i}", block, rack)
        for rack, (block, count) in per_rack.items()
        for i in range(1, count + 1)
    )


def gang(
    id: int, workers: int, level: str = RACK, required: bool = False, **kw: object
) -> PendingJob:
    return replace(
        pending(id, "a", workers=workers, gpus=8, **kw),  # type: ignore[arg-type]
        topology_level=level,
        topology_required=required,
    )


def plan_of(
    nodes: tuple[Node, ...],
    jobs: tuple[PendingJob, ...],
    running_jobs: tuple[RunningJob, ...] = (),
    policy: Policy | None = None,
) -> Plan:
    snapshot = Snapshot(NOW, nodes, (team("a"), team("b")), running_jobs, jobs, topologies=LEVELS)
    return plan(snapshot, policy)


def racks_of(placement: tuple[tuple[str, int], ...]) -> set[str]:
    return {node.split("-")[0] for node, _ in placement}


def test_a_required_rack_gang_goes_to_the_tightest_rack_that_holds_it() -> None:
    # r1 has 4 nodes, r2 has 3: a gang of 3 goes to r2 and leaves r1 whole.
    result = plan_of(cluster({"r1": ("b1", 4), "r2": ("b1", 3)}), (gang(1, 3, required=True),))
    (admission,) = result.admissions
    assert racks_of(admission.placement) == {"r2"}
    assert admission.domain == f"{RACK}=r2"


def test_a_rack_in_a_broken_block_is_taken_before_one_in_a_whole_block() -> None:
    # r1 (b1) and r3 (b2) both have 2 empty nodes; b1's other rack is busy, b2's is empty:
    # the gang goes to r1 and block b2 stays whole.
    nodes = cluster({"r1": ("b1", 2), "r2": ("b1", 2), "r3": ("b2", 2), "r4": ("b2", 2)})
    busy = running(50, "b", {"r2-n1": 1, "r2-n2": 1}, gpus=8)
    result = plan_of(nodes, (gang(1, 2, required=True),), (busy,))
    (admission,) = result.admissions
    assert racks_of(admission.placement) == {"r1"}


def test_a_required_rack_gang_waits_with_a_reason_naming_the_level_and_the_numbers() -> None:
    # Four free nodes, but three in r1 and one in r2: no rack holds 4 workers of 8 GPUs.
    nodes = cluster({"r1": ("b1", 3), "r2": ("b1", 3)})
    busy = running(50, "b", {"r2-n1": 1, "r2-n2": 1}, gpus=8, preemptible=False)
    result = plan_of(nodes, (gang(1, 4, required=True),), (busy,))
    assert result.admissions == ()
    (waiting,) = result.pending
    assert waiting.reason.code is ReasonCode.NO_DOMAIN
    numbers = waiting.reason.numbers
    assert numbers["level"] == RACK
    assert (numbers["workers"], numbers["best_fit"], numbers["largest"]) == (4, 3, 3)
    assert numbers["workers_fit"] == 4  # across racks it would fit


def test_a_preferred_rack_gang_takes_two_racks_only_when_no_rack_holds_it() -> None:
    nodes = cluster({"r1": ("b1", 3), "r2": ("b1", 3)})
    fits = plan_of(nodes, (gang(1, 3),))
    assert racks_of(fits.admissions[0].placement) in ({"r1"}, {"r2"})
    spans = plan_of(nodes, (gang(1, 4),))
    (admission,) = spans.admissions
    assert racks_of(admission.placement) == {"r1", "r2"}
    assert admission.domain == f"{BLOCK}=b1"  # the next level out holds it


def test_a_preferred_gang_holds_out_for_one_rack_for_an_hour_then_takes_two() -> None:
    """r1 and r2 of 3 nodes, one node of each busy: a gang of 3 waits for a rack while it is
    younger than Policy.topology_patience_seconds, then starts on two racks (no busy job's
    end is known: no rack can be reserved for it)."""
    nodes = cluster({"r1": ("b1", 3), "r2": ("b1", 3)})
    busy = (
        running(50, "b", {"r1-n1": 1}, gpus=8, preemptible=False),
        running(51, "b", {"r2-n1": 1}, gpus=8, preemptible=False),
    )
    young = plan_of(nodes, (gang(1, 3, submitted=NOW - 600),), busy)
    assert young.admissions == ()
    assert young.pending[0].reason.code is ReasonCode.NO_DOMAIN
    old = plan_of(nodes, (gang(1, 3, submitted=NOW - 7200),), busy)
    (admission,) = old.admissions
    assert racks_of(admission.placement) == {"r1", "r2"}


def test_a_requeued_gang_holds_out_for_an_hour_after_its_requeue() -> None:
    """A gang submitted two hours ago and preempted ten minutes ago holds out for one rack
    again: its patience counts from its requeue, or it would restart on two racks at once."""
    nodes = cluster({"r1": ("b1", 3), "r2": ("b1", 3)})
    busy = (
        running(50, "b", {"r1-n1": 1}, gpus=8, preemptible=False),
        running(51, "b", {"r2-n1": 1}, gpus=8, preemptible=False),
    )
    requeued = replace(gang(1, 3, submitted=NOW - 7200), requeued_at=NOW - 600)
    patient = Policy(starvation_seconds=10 * 3600)  # not starving: no reservation
    result = plan_of(nodes, (requeued,), busy, patient)
    assert result.admissions == ()
    assert result.pending[0].reason.code is ReasonCode.NO_DOMAIN
    long_ago = replace(requeued, requeued_at=NOW - 3700)
    (admission,) = plan_of(nodes, (long_ago,), busy, patient).admissions
    assert racks_of(admission.placement) == {"r1", "r2"}


def test_a_starving_gang_that_holds_out_reserves_in_one_rack() -> None:
    """Two free nodes in each of r1 and r2 hold a gang of 3 only across the racks: a starving
    gang still holding out for a rack reserves r1 for when its busy node ends (in an hour),
    not the four free nodes of two racks now."""
    nodes = cluster({"r1": ("b1", 3), "r2": ("b1", 3)})
    busy = (
        running(50, "b", {"r1-n1": 1}, gpus=8, preemptible=False, max_runtime=2 * 3600),
        running(51, "b", {"r2-n1": 1}, gpus=8, preemptible=False, max_runtime=5 * 3600),
    )
    job = replace(gang(1, 3, submitted=NOW - 5 * 3600), requeued_at=NOW - 600)
    result = plan_of(nodes, (job,), busy)
    assert result.admissions == ()
    (reservation,) = result.reservations
    assert racks_of(reservation.placement) == {"r1"}
    assert reservation.expected_start == NOW + 3600  # r1-n1's job started an hour ago


def test_a_starving_gang_past_its_patience_reserves_a_rack_instead_of_splitting() -> None:
    """Past its hour, a starving gang that a rack could hold does not take the four free
    nodes of two racks: r1 is reserved for it, to start when r1-n1's job ends (in an hour),
    and only a job that ends before then backfills there."""
    nodes = cluster({"r1": ("b1", 3), "r2": ("b1", 3)})
    busy = (
        running(50, "b", {"r1-n1": 1}, gpus=8, preemptible=False, max_runtime=2 * 3600),
        running(51, "b", {"r2-n1": 1}, gpus=8, preemptible=False, max_runtime=5 * 3600),
    )
    job = gang(1, 3, submitted=NOW - 2 * 3600)
    short = pending(2, "b", workers=1, gpus=8, submitted=NOW - 60, max_runtime=1800)
    long = [
        pending(i, "b", workers=1, gpus=8, submitted=NOW - 30, max_runtime=3 * 3600)
        for i in (3, 4, 5)
    ]
    result = plan_of(nodes, (job, short, *long), busy)
    (reservation,) = result.reservations
    assert reservation.job_id == 1 and racks_of(reservation.placement) == {"r1"}
    assert reservation.expected_start == NOW + 3600
    placed = {a.job_id: racks_of(a.placement) for a in result.admissions}
    assert 1 not in placed and 2 in placed  # the short job starts, in r2 or backfilling r1
    on_r1 = [i for i, racks in placed.items() if "r1" in racks]
    assert set(on_r1) <= {2}  # the long jobs only take r2's two free nodes
    assert len(placed) == 2 + len(on_r1)  # r2's two nodes filled, r1 left to job 1 but 2's


def test_a_starving_gang_that_no_rack_reservation_can_serve_takes_two_racks() -> None:
    """Every reservation taken (Policy.max_reservations): the gang past its hour does not
    wait for a rack no one frees for it, it starts on two racks as before."""
    nodes = cluster({"r1": ("b1", 3), "r2": ("b1", 3)})
    busy = (
        running(50, "b", {"r1-n1": 1}, gpus=8, preemptible=False, max_runtime=2 * 3600),
        running(51, "b", {"r2-n1": 1}, gpus=8, preemptible=False, max_runtime=5 * 3600),
    )
    job = gang(1, 3, submitted=NOW - 2 * 3600)
    result = plan_of(nodes, (job,), busy, Policy(max_reservations=0))
    (admission,) = result.admissions
    assert racks_of(admission.placement) == {"r1", "r2"}


def test_a_starving_gang_that_could_start_now_waits_for_a_rack_only_so_long() -> None:
    """Two racks hold the gang now, the first rack frees in 17 hours: past its patience the
    gang (no runtime known) waits for a rack no longer than Policy.topology_reserve_seconds
    (16 h), and starts on two racks; with 18 h it has r1 reserved."""
    nodes = cluster({"r1": ("b1", 3), "r2": ("b1", 3)})
    busy = (
        running(50, "b", {"r1-n1": 1}, gpus=8, preemptible=False, max_runtime=18 * 3600),
        running(51, "b", {"r2-n1": 1}, gpus=8, preemptible=False, max_runtime=19 * 3600),
    )
    job = gang(1, 3, submitted=NOW - 2 * 3600)
    (admission,) = plan_of(nodes, (job,), busy).admissions
    assert racks_of(admission.placement) == {"r1", "r2"}
    longer = Policy(topology_reserve_seconds=18 * 3600)
    result = plan_of(nodes, (job,), busy, longer)
    assert result.admissions == ()
    (reservation,) = result.reservations
    assert racks_of(reservation.placement) == {"r1"}


def test_a_short_gang_waits_for_a_rack_no_longer_than_its_runtime() -> None:
    """Two racks hold the gang now, r1 frees in three hours: a gang predicted to run two hours
    would lose less split than waiting (Policy.topology_split_cost 1: a split costs its
    runtime), so it starts on two racks; one predicted to run four hours has r1 reserved."""
    nodes = cluster({"r1": ("b1", 3), "r2": ("b1", 3)})
    busy = (
        running(50, "b", {"r1-n1": 1}, gpus=8, preemptible=False, max_runtime=4 * 3600),
        running(51, "b", {"r2-n1": 1}, gpus=8, preemptible=False, max_runtime=5 * 3600),
    )
    short = gang(1, 3, submitted=NOW - 2 * 3600, expected_runtime=2 * 3600)
    (admission,) = plan_of(nodes, (short,), busy).admissions
    assert racks_of(admission.placement) == {"r1", "r2"}
    long = replace(short, expected_runtime=4 * 3600)
    result = plan_of(nodes, (long,), busy)
    assert result.admissions == ()
    (reservation,) = result.reservations
    assert racks_of(reservation.placement) == {"r1"}
    assert reservation.expected_start == NOW + 3 * 3600


def test_a_starving_gang_that_could_not_start_anywhere_now_keeps_its_rack_reserved() -> None:
    """No two racks hold the gang now either (three nodes free in one hour, r1 whole in ten):
    it waits either way, so r1 is reserved for it, more than 8 h after any nodes would hold
    it; the bound applies once it could start on two racks (the test above)."""
    nodes = cluster({"r1": ("b1", 3), "r2": ("b1", 3)})
    busy = (
        running(50, "b", {"r1-n1": 1}, gpus=8, preemptible=False, max_runtime=11 * 3600),
        running(51, "b", {"r2-n1": 1}, gpus=8, preemptible=False, max_runtime=12 * 3600),
        running(52, "b", {"r1-n2": 1}, gpus=8, preemptible=False, max_runtime=2 * 3600),
        running(53, "b", {"r2-n2": 1}, gpus=8, preemptible=False, max_runtime=2 * 3600),
    )
    result = plan_of(nodes, (gang(1, 3, submitted=NOW - 2 * 3600),), busy)
    assert result.admissions == ()
    (reservation,) = result.reservations
    assert racks_of(reservation.placement) == {"r1"}
    assert reservation.expected_start == NOW + 10 * 3600


def b_borrows_two_nodes_of_each_rack(job: PendingJob) -> Snapshot:
    """Two racks of three nodes; team b (no guarantee) borrows two whole nodes in each with
    one-node jobs 50-53; team a (guaranteed 32 GPUs) waits with `job`."""
    borrowed = (
        running(50, "b", {"r1-n1": 1}, gpus=8),
        running(51, "b", {"r1-n2": 1}, gpus=8),
        running(52, "b", {"r2-n1": 1}, gpus=8),
        running(53, "b", {"r2-n2": 1}, gpus=8),
    )
    return Snapshot(
        NOW,
        cluster({"r1": ("b1", 3), "r2": ("b1", 3)}),
        (team("a", guarantee=32), team("b", guarantee=0)),
        borrowed,
        (job,),
        topologies=LEVELS,
    )


def test_a_gang_holding_out_for_a_rack_preempts_inside_one_rack() -> None:
    """As for a required rack, the victims of a gang holding out for a preferred one free one
    rack whole: the gang would not take two half-freed racks."""
    result = plan(b_borrows_two_nodes_of_each_rack(gang(1, 3, submitted=NOW - 600)))
    victims = {p.job_id for p in result.preemptions}
    assert victims in ({50, 51}, {52, 53})
    (waiting,) = result.pending
    assert waiting.reason.code is ReasonCode.WAITING_FOR_PREEMPTION


def test_a_preferred_gang_that_no_block_holds_goes_anywhere() -> None:
    nodes = cluster({"r1": ("b1", 2), "r3": ("b2", 2)})
    (admission,) = plan_of(nodes, (gang(1, 3),)).admissions
    assert racks_of(admission.placement) == {"r1", "r3"} and admission.domain == ""


def test_a_gang_that_no_rack_can_ever_hold_says_so() -> None:
    result = plan_of(cluster({"r1": ("b1", 2), "r2": ("b1", 2)}), (gang(1, 3, required=True),))
    (waiting,) = result.pending
    assert waiting.reason.code is ReasonCode.NO_DOMAIN
    assert waiting.reason.numbers["largest"] == 2


def test_a_required_host_gang_stays_on_one_node() -> None:
    nodes = (rack_node("r1-n1", "b1", "r1", 8), rack_node("r1-n2", "b1", "r1", 8))
    job = replace(pending(1, "a", workers=2, gpus=4), topology_level=HOST, topology_required=True)
    (admission,) = plan_of(nodes, (job,)).admissions
    assert len(admission.placement) == 1 and admission.domain.startswith(f"{HOST}=")


def test_reclaim_for_a_required_rack_frees_one_rack_whole() -> None:
    """Team b borrows one node in each of r1 and r2 with 1-node jobs, and all of r1's third
    node; team a's guarantee asks 3 nodes in one rack. The victims are all in one rack (r1,
    where taking two jobs frees the rack) rather than the cheapest anywhere."""
    result = plan(b_borrows_two_nodes_of_each_rack(gang(1, 3, required=True)))
    victims = {p.job_id for p in result.preemptions}
    assert victims in ({50, 51}, {52, 53})
    (waiting,) = result.pending
    assert waiting.reason.code is ReasonCode.WAITING_FOR_PREEMPTION


def test_a_level_the_flavor_does_not_have_places_the_gang_anywhere() -> None:
    nodes = cluster({"r1": ("b1", 2), "r2": ("b1", 2)})
    job = gang(1, 3, level="example.com/spine", required=True)
    (admission,) = plan_of(nodes, (job,)).admissions
    assert admission.domain == ""


# --- invariants ------------------------------------------------------------------------------


@st.composite
def racked(draw: st.DrawFn) -> Snapshot:
    """The property tests' snapshots with the nodes in racks of one or two nodes in two
    blocks (some nodes in no rack), and some pending gangs asking a level."""
    snapshot = draw(test_properties.snapshots())
    nodes = []
    for i, node in enumerate(snapshot.nodes):
        labels = {BLOCK: f"b{i // 2 % 2}"}
        rack = draw(st.sampled_from(["r1", "r2", "r3", ""]))
        if rack:
            labels[RACK] = rack
        nodes.append(replace(node, labels=labels))
    pending_jobs = []
    for job in snapshot.pending:
        level = draw(st.sampled_from(["", RACK, RACK, BLOCK, HOST, "example.com/spine"]))
        # Some requeued (a preemption) minutes or hours ago: their patience starts again.
        requeued = draw(st.sampled_from([None, None, 300.0, 7200.0]))
        pending_jobs.append(
            replace(
                job,
                topology_level=level,
                topology_required=draw(st.booleans()),
                requeued_at=None if requeued is None else snapshot.now - requeued,
                submitted_at=job.submitted_at - draw(st.sampled_from([0.0, 0.0, 7200.0])),
            )
        )
    return replace(
        snapshot,
        nodes=tuple(nodes),
        pending=tuple(pending_jobs),
        topologies={"h100": (BLOCK, RACK, HOST)},
    )


@test_properties.SETTINGS
@given(racked(), test_properties.policies())
def test_a_required_gang_never_spans_two_domains_and_the_invariants_hold(
    snapshot: Snapshot, policy: Policy
) -> None:
    result = plan(snapshot, policy)
    jobs = {j.id: j for j in snapshot.pending}
    labels = {n.name: n.labels for n in snapshot.nodes}
    for admission in result.admissions:
        job = jobs[admission.job_id]
        if job.topology_required and job.topology_level in (BLOCK, RACK, HOST):
            key = job.topology_level
            paths = {
                (labels[n].get(BLOCK), labels[n].get(RACK) if key != BLOCK else None)
                if key != HOST
                else n
                for n, _ in admission.placement
            }
            assert len(paths) == 1, (admission, paths)
            if key == RACK:
                assert all(labels[n].get(RACK) for n, _ in admission.placement)
            assert admission.domain.startswith(f"{key}=")
    # The domains' kept counts (topology.DomainGPUs, Counts) change no plan.
    assert Cycle(snapshot, policy, memo=False).run() == result
    test_properties.test_every_plan_keeps_the_invariants.hypothesis.inner_test(  # type: ignore[attr-defined]
        snapshot, policy
    )


def _domain(node: Node, key: str) -> object:
    labels = node.labels
    if key == HOST:
        return node.name
    if key == BLOCK:
        return labels.get(BLOCK) or None
    return (labels.get(BLOCK), labels[RACK]) if labels.get(RACK) else None


@test_properties.SETTINGS
@given(racked(), test_properties.policies())
def test_a_preferred_gang_holding_out_is_admitted_and_reserved_in_one_domain(
    snapshot: Snapshot, policy: Policy
) -> None:
    """A gang preferring a level, within its patience since its submission or last requeue,
    that one domain of the level could hold empty, starts or reserves in one domain only."""
    result = plan(snapshot, policy)
    nodes = {n.name: n for n in snapshot.nodes}
    patience = policy.topology_patience_seconds

    def holds_out(job: PendingJob) -> bool:
        if job.topology_required or job.topology_level not in (BLOCK, RACK, HOST):
            return False
        since = job.submitted_at if job.requeued_at is None else job.requeued_at
        if snapshot.now >= since + patience:
            return False
        room: dict[object, int] = {}
        for node in snapshot.nodes:
            domain = _domain(node, job.topology_level)
            if node.schedulable and domain is not None and job.flavor in node.capacity:
                room[domain] = room.get(domain, 0) + node.capacity[job.flavor] // (
                    job.gpus_per_worker
                )
        return max(room.values(), default=0) >= job.workers

    jobs = {j.id: j for j in snapshot.pending}
    placed = [(a.job_id, a.placement) for a in result.admissions]
    placed += [(r.job_id, r.placement) for r in result.reservations]
    for job_id, placement in placed:
        job = jobs[job_id]
        if job.gpu_milli or not holds_out(job):
            continue
        domains = {_domain(nodes[n], job.topology_level) for n, _ in placement}
        assert len(domains) == 1 and None not in domains, (job, placement)


@st.composite
def reservations(draw: st.DrawFn) -> tuple[Snapshot, PendingJob, dict[str, int], list]:
    """Racks of one to three nodes in two blocks (some nodes in no rack), the GPUs available
    on each, and GPUs coming back on them over time (a reservation's release events)."""
    nodes = []
    for i in range(draw(st.integers(1, 9))):
        labels = {BLOCK: f"b{i % 2}"}
        rack = draw(st.sampled_from(["r1", "r2", "r3", "r4", ""]))
        if rack:
            labels[RACK] = rack
        nodes.append(Node(f"n{i}", {"h100": 8}, labels=labels))
    names = [n.name for n in nodes]
    avail = {name: draw(st.integers(0, 8)) for name in names}
    events = sorted(
        (draw(st.sampled_from([-math.inf, NOW, NOW + 60, NOW + 3600])), name, gpus, job)
        for job, (name, gpus) in enumerate(
            draw(st.lists(st.tuples(st.sampled_from(names), st.integers(1, 8)), max_size=12))
        )
    )
    job = gang(1, draw(st.integers(1, 4)), required=True)
    job = replace(job, gpus_per_worker=draw(st.sampled_from([1, 2, 4, 8])))
    snapshot = Snapshot(NOW, tuple(nodes), (team("a"),), (), (job,), topologies=LEVELS)
    return snapshot, job, avail, events


@test_properties.SETTINGS
@given(reservations(), st.sampled_from(list(PlacementStrategy)))
def test_a_reservation_in_one_domain_is_where_placing_after_each_release_first_finds_one(
    case: tuple[Snapshot, PendingJob, dict[str, int], list], strategy: PlacementStrategy
) -> None:
    """`Topology.start` walks the releases once, counting per domain, and `place_held` places
    in what it counted: the same time and placement as placing the gang afresh (`place_on`,
    one domain of its level) at once and after each release in turn, until it fits."""
    snapshot, job, avail, events = case
    cycle = Cycle(snapshot, Policy())
    fl = cycle.ledger.flavors["h100"]
    topology = cycle.topology
    plain: tuple[float, object] = (math.inf, None)
    walked = dict(avail)
    for at, node, gpus, _ in [(AT_ONCE, "", 0, 0), *events]:
        if node:
            walked[node] += gpus
        found = topology.place_on(fl, job, walked, strategy, None, strict=True)
        if found is not None:
            plain = (at, found)
            break
    counted = dict(avail)
    start, held = topology.start(fl, job, counted, events, None)
    assert (start, topology.place_held(fl, job, counted, held, strategy, None)) == plain
