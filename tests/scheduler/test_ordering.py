"""The order's runs (`Order.runs`): taking a run's jobs one after another while the ledger does
not change gives the order of one job at a time (`Order.queued`), and the verdict kept for a
kind of job that waits is given to that kind only."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuqueue.scheduler import plan
from gpuqueue.scheduler.engine import Cycle
from gpuqueue.scheduler.ledger import Ledger
from gpuqueue.scheduler.model import PendingJob, Policy, Snapshot
from gpuqueue.scheduler.ordering import Order
from tests.scheduler.builders import HOUR, NOW, nodes, pending, running, team


def _order() -> tuple[Order, Ledger]:
    """Teams a and b, a fair share of 4 each on one 8-GPU node, nothing running. Team a has a
    job that starves (two hours old) and two recent ones; team b two recent ones. Team a is
    keyed first (no usage either, and 'a' < 'b')."""
    snapshot = Snapshot(
        now=NOW,
        nodes=nodes(1, h100=8),
        teams=(team("a", guarantee=4), team("b", guarantee=4)),
        running=(),
        pending=(
            pending(1, "a", submitted=NOW - 2 * HOUR),
            pending(2, "a"),
            pending(3, "a"),
            pending(4, "b"),
            pending(5, "b"),
        ),
    )
    ledger = Ledger(snapshot.nodes, {"a": ("a",), "b": ("b",)})
    shares = {("a", "h100"): 4, ("b", "h100"): 4}
    order = Order(snapshot, ledger, shares, {("a", "h100"): 1.0, ("b", "h100"): 1.0}, HOUR)
    return order, ledger


def _admit_the_starving_job(order: Order, ledger: Ledger) -> None:
    assert [job.id for job in order.starving] == [1]
    ledger.admit("a", "u", "h100", 1, True, (("n1", 1),))


def test_a_team_keyed_before_its_starving_job_was_admitted_gets_one_job_then_is_rekeyed() -> None:
    """Once its starving job runs, team a holds 1 GPU and team b none: a's next job was already
    first in line (keyed before), then b goes first, and a's last job comes after b's."""
    order, ledger = _order()
    _admit_the_starving_job(order, ledger)
    assert [job.id for job in order.queued()] == [2, 4, 5, 3]


def test_runs_taken_whole_while_nothing_changes_give_the_same_order() -> None:
    order, ledger = _order()
    _admit_the_starving_job(order, ledger)
    taken = []
    for run in order.runs():
        while run:
            taken.append(run.pop().id)  # nothing is admitted: the ledger's stamp stays
    assert taken == [2, 4, 5, 3]


# (user, priority, minutes since submission) of each pending job, and GPUs per user running.
_JOBS = st.lists(
    st.tuples(st.sampled_from("uvw"), st.integers(0, 2), st.integers(0, 180)), max_size=25
)
_HELD = st.fixed_dictionaries({u: st.integers(0, 3) for u in "uvw"})


@given(_JOBS, _HELD)
def test_runs_of_several_users_taken_whole_give_the_order_of_one_job_at_a_time(
    jobs: list[tuple[str, int, int]], held: dict[str, int]
) -> None:
    """A run is one user's jobs until the next user's head comes first (`Order.runs`): taken
    whole, they come in the order that re-keying the user after each job gives."""
    job_id = iter(range(100, 1000))
    snapshot = Snapshot(
        now=NOW,
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=8), team("b", guarantee=8)),
        running=tuple(
            running(next(job_id), "a", {"n1": 1}, gpus=gpus, user=user)
            for user, gpus in held.items()
            if gpus
        ),
        pending=tuple(
            pending(i, "a", user=user, priority=priority, submitted=NOW - 60 * minutes)
            for i, (user, priority, minutes) in enumerate(jobs, start=1)
        ),
    )

    def order() -> Order:
        ledger = Ledger(snapshot.nodes, {"a": ("a",), "b": ("b",)})
        for job in snapshot.running:
            ledger.admit(job.team, job.user, job.flavor, job.gpus_per_worker, True, job.placement)
        return Order(snapshot, ledger, {("a", "h100"): 8}, {}, 100 * HOUR)

    taken = []
    for run in order().runs():
        while run:
            taken.append(run.pop().id)
    assert taken == [job.id for job in order().queued()]
    assert sorted(taken) == list(range(1, len(jobs) + 1))


def test_a_kind_that_waits_gives_its_verdict_to_that_kind_only() -> None:
    """Team a's two 8-GPU jobs wait (one GPU is free, team c's work cannot be preempted); the
    second gets the first's verdict, and the 1-GPU job after them (another kind) is still
    considered and admitted, as without any kept verdict."""
    snapshot = Snapshot(
        now=NOW,
        nodes=nodes(1, h100=8),
        teams=(team("a", guarantee=2), team("c", guarantee=6)),
        running=(
            running(10, "a", {"n1": 1}),
            running(11, "c", {"n1": 1}, gpus=6, preemptible=False),
        ),
        pending=(pending(1, "a", gpus=8), pending(2, "a", gpus=8), pending(3, "a")),
    )
    kept = plan(snapshot, Policy())
    assert [a.job_id for a in kept.admissions] == [3]
    assert Cycle(snapshot, Policy(), memo=False).run() == kept
    # The second 8-GPU job is not decided again: it takes the first's kept verdict.
    cycle, decided = Cycle(snapshot, Policy()), []
    decide = cycle._decide
    cycle._decide = lambda job: decided.append(job.id) or decide(job)  # type: ignore[method-assign]
    assert cycle.run() == kept and 1 in decided and 2 not in decided


def _starving(*jobs: PendingJob, limit: int = 1000, share: int = 4) -> list[int]:
    """The starving jobs of team a (guarantee 4), holding nothing, with its fair share."""
    snapshot = Snapshot(
        now=NOW,
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=4, limit=limit), team("b", guarantee=4)),
        running=(),
        pending=jobs,
    )
    ledger = Ledger(snapshot.nodes, {"a": ("a",), "b": ("b",)})
    shares = {("a", "h100"): share, ("b", "h100"): 4}
    return [job.id for job in Order(snapshot, ledger, shares, {}, HOUR, min_one_job=True).starving]


def test_a_team_holding_nothing_does_not_start_a_job_below_its_top_priority_first() -> None:
    # Team a's fair share (4) is smaller than either job: the one-job rule makes one of them
    # starving. Not job 10, although it waited longest: job 2 has the higher priority (job 10
    # was preempted for it, and would take its GPUs back for ever).
    assert _starving(
        pending(10, "a", gpus=8, submitted=NOW - 3 * HOUR),
        pending(2, "a", gpus=8, priority=2, submitted=NOW - 2 * HOUR),
    ) == [2]


def test_a_job_that_can_never_start_neither_starves_nor_keeps_its_team_from_starving() -> None:
    # Jobs 3 and 4 ask 16 GPUs of a team limited to 8: no state admits them. Job 3 has the
    # top priority, job 4 waited longest; neither takes the team's starving turn: job 10 does.
    assert _starving(
        pending(3, "a", workers=2, gpus=8, priority=5, submitted=NOW - 4 * HOUR),
        pending(4, "a", workers=2, gpus=8, submitted=NOW - 5 * HOUR),
        pending(10, "a", gpus=8, submitted=NOW - 3 * HOUR),
        limit=8,
    ) == [10]


def test_a_job_that_can_never_start_does_not_starve_even_where_it_fits_the_room() -> None:
    # Job 5 is not preemptible and asks 8 GPUs of a team guaranteed 4: no state admits it,
    # though it fits the team's fair share of 8 today.
    assert _starving(
        pending(5, "a", gpus=8, preemptible=False, submitted=NOW - 4 * HOUR),
        pending(10, "a", gpus=8, submitted=NOW - 3 * HOUR),
        share=8,
    ) == [10]
