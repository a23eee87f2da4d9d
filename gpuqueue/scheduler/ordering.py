"""The order in which pending jobs are considered in a cycle.

The order is dynamic: admitting a job raises its team's usage and its user's usage, which moves
the team back in line. Each rule is a key function below, numbered in the order it applies.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Mapping
from itertools import compress, repeat
from operator import attrgetter, eq

from gpuqueue.scheduler.horizon import Horizon
from gpuqueue.scheduler.ledger import Ledger
from gpuqueue.scheduler.model import PendingJob, Snapshot
from gpuqueue.scheduler.never import NeverAdmits

TeamKey = tuple[float, float, int, str, str]
JobKey = tuple[int, int, float, int]


# Rule 1. A job that has waited past the starvation threshold goes before everything else,
# oldest first: without this a big gang can wait forever behind small jobs that always fit.
# Only a job that keeps its team within its fair share counts as starving: borrowed work is
# opportunistic, and a requeued victim (which keeps its old submission time) must not jump
# the queue and take back what was just reclaimed from it. One exception (Policy.min_one_job):
# the oldest such job of a team that holds no GPUs of the flavor counts too, so that a team
# whose fair share is smaller than its smallest gang (a team with no guarantee under
# contention) still runs something. A reclaim victim's team keeps at least its fair share,
# so it never holds nothing because of a reclaim unless its share is zero, and then its last
# job is not reclaimed (preemption.py).
# With time-based fair share (the snapshot carries `share_balance`, usage.py), that exception
# goes by the team's balance instead of the wait: a team that holds nothing and is not in debt
# (`owed`) has its oldest job starving at once, and it may reclaim (engine.py); a team in debt
# gets no exception and waits until its balance recovers. When the owed team has no guarantee
# of the flavor, that job goes ahead of the other starving jobs (`first`): it has no other way
# to a GPU under contention, and behind older starving gangs it finds every reservation taken
# and waits for hours for a turn of about a slice (usage.py). The guarantee comes first: where
# teams below their guarantee of the flavor wait for jobs within it (their claims), the owed job
# has that turn only if it starts now on free GPUs that leave the claims theirs; else it is
# neither first nor starving nor owed (it would take GPUs a claim is entitled to, or reserve
# them as they free, be reclaimed, requeued and go first again, for ever). What the claims
# leave, it takes before any borrower, which rule 2 would otherwise put ahead of a team with no
# share (tests/scheduler/test_owed_turn.py). Where the guarantees add up to the flavor and
# their teams ask for all of it, the free GPUs never exceed the claims: such a team runs only
# on what a team leaves of its guarantee. A team with a guarantee keeps the order of
# submission (putting its big gangs first too drained more nodes at 120 % load:
# docs/benchmarks.md, "What each rule costs").
# Neither rule makes a job starving below the highest priority pending in its queue: rule 3
# holds before any wait. Otherwise a job preempted for a higher-priority job of its team (it
# keeps its old submission time) would start again, as a starving job, on the GPUs it had just
# given up, and be preempted again once its minimum runtime ended, for ever. A job that no state
# of the cluster admits (never.py) is never starving, and blocks no other.
starving_key: Callable[[PendingJob], tuple[float, int]] = attrgetter("submitted_at", "id")


# Rule 1b. A team's turn: once the oldest job at its queue's top priority has waited past the
# starvation threshold, that job has the team's turn (`Order.turns`). The team's newer jobs of
# no higher priority then start only while they leave it room under the team's own limit
# (engine.py, step 4c; Policy.hold_for_older), or end before its reservation starts. Without
# this a gang at its team's limit is overtaken for as long as the team's newer, smaller jobs
# keep taking each GPU the team gets back; with it, they pass it for at most the starvation
# threshold, plus the runtime of the team's jobs running then while the team drains to make
# it room, plus that of the jobs on the nodes it then reserves (tests/scheduler/
# test_team_turn.py). Counting such a job as starving when its team's newer jobs hold its room
# within the fair share (rather than the limit) tripled preemptions in a Philly replay: it
# borrows, is reclaimed, and starves again (docs/benchmarks.md, "The worst waits").
def turn_of(jobs: list[PendingJob], top: int, one_priority: bool = False) -> PendingJob:
    """The oldest job of a queue at its top priority (`_top_priority`, whose jobs some state
    admits): the one that may have the team's turn. `one_priority`: every job of the queue
    has that priority (most queues), so none is left out."""
    if one_priority:
        return min(jobs, key=starving_key)
    # (C-level: the jobs whose priority equals top, read once.)
    return min(compress(jobs, map(eq, map(_PRIORITY, jobs), repeat(top))), key=starving_key)


# Rule 2. Between teams, the team furthest below its fair share goes next (GPUs in use divided by
# fair share; a team with no fair share goes last), then the larger weight, then fewer GPUs in
# use (which only separates teams with no fair share), then the team id.
def team_key(in_use: int, fair_share: int, weight: float, team: str, flavor: str) -> TeamKey:
    ratio = in_use / fair_share if fair_share > 0 else math.inf
    return (ratio, -weight, in_use, team, flavor)


# Rule 3. Inside a team, higher priority first.
# Rule 4. Then the user with the fewest GPUs of the flavor in use, so that one user cannot take
#         the team's whole share by submitting first.
# Rule 5. Then the earlier turn: the submission, plus model.RUNTIME_AGING x the expected runtime
#         (or the max runtime): shortest predicted first, with aging. The turn is
#         `PendingJob.rank`, made with the job, and every sort of a queue reads it: a change to
#         this rule belongs there, not in job_key (which orders only users' heads).
# Rule 6. Then the smaller job id, so that the order is total.
def job_key(job: PendingJob, user_in_use: int) -> JobKey:
    return (-job.priority, user_in_use, job.rank[1], job.id)


def _first_before(jobs: list[PendingJob], user_used: int, bound: JobKey) -> int:
    """The index in one user's jobs (best last) from which on each job's key (`job_key` with
    `user_used`) is below `bound`, another user's head; the last job always. Its keys are in
    the order of the jobs' ranks, so the test reads the rank against a bound of the same shape,
    galloping back from the end (most runs are a job or two) then bisecting."""
    priority = bound[0]
    if user_used < bound[1]:
        below: tuple[float, ...] = (priority + 1,)  # every job of its priority or higher
    elif user_used > bound[1]:
        below = (priority,)  # those of a higher priority only
    else:
        below = (priority, bound[2], bound[3])
    hi = len(jobs) - 1  # from here on below the bound
    step = 1
    lo = hi - step
    while lo >= 0 and jobs[lo].rank < below:
        hi = lo
        step *= 2
        lo = hi - step
    lo = lo + 1 if lo >= 0 else 0  # jobs[lo - 1], when there is one, is not below
    while lo < hi:
        mid = (lo + hi) // 2
        if jobs[mid].rank < below:
            hi = mid
        else:
            lo = mid + 1
    return lo


_RANK = attrgetter("rank")
_GPUS = attrgetter("gpus")
_SUBMITTED = attrgetter("submitted_at")
_USER = attrgetter("user")
_PRIORITY = attrgetter("priority")


def _top_priority(
    jobs: list[PendingJob], never: NeverAdmits, priorities: set[int] | None = None
) -> int | None:
    """The highest priority among the jobs that some state admits (None: no job).
    `priorities`: those of `jobs`, when known."""
    if priorities is None:
        priorities = set(map(_PRIORITY, jobs))
    if len(priorities) == 1:
        (priority,) = priorities
        return priority if not all(map(never, jobs)) else None
    for priority in sorted(priorities, reverse=True):
        if any(job.priority == priority and not never(job) for job in jobs):
            return priority
    return None


def _starts_beyond(ledger: Ledger, job: PendingJob, claims: int) -> bool:
    """Whether `job` fits the free GPUs of its flavor now, and their count leaves `claims`."""
    fl = ledger.flavors.get(job.flavor)
    return (
        fl is not None
        and fl.total_free - claims >= job.gpus
        and fl.fits(job.gpus_per_worker, "", job.cpu_per_worker, job.memory_per_worker)
        >= job.workers
    )


class QueueJobs:
    """One queue's pending jobs (a team's, for one flavor) and what the order and the fair
    shares read of them whatever the ledger holds."""

    __slots__ = ("_priorities", "gpus", "jobs", "oldest", "smallest")

    def __init__(self, jobs: list[PendingJob]) -> None:
        if not jobs:
            raise ValueError("a queue has at least one job")
        self.jobs = jobs
        self.gpus = sum(map(_GPUS, jobs))  # the queue's pending demand
        self.smallest = min(map(_GPUS, jobs))
        self.oldest = min(map(_SUBMITTED, jobs))
        self._priorities: set[int] | None = None

    def priorities(self) -> set[int]:
        """The priorities of the queue's jobs (read when a turn is looked for)."""
        if self._priorities is None:
            self._priorities = set(map(_PRIORITY, self.jobs))
        return self._priorities

    def top_priority(self, never: NeverAdmits) -> int | None:
        return _top_priority(self.jobs, never, self.priorities())

    def turn(self, top: int) -> PendingJob:
        return turn_of(self.jobs, top, len(self.priorities()) == 1)

    def by_user(self) -> dict[str, list[PendingJob]]:
        """user -> the user's jobs best last (rules 3, 5 and 6), users by name."""
        jobs = self.jobs
        first = jobs[0].user
        if all(map(first.__eq__, map(_USER, jobs))):  # one user, often
            return {first: sorted(jobs, key=_RANK, reverse=True)}
        users: dict[str, list[PendingJob]] = {}
        for job in jobs:
            users.setdefault(job.user, []).append(job)
        return {user: sorted(users[user], key=_RANK, reverse=True) for user in sorted(users)}


class _Queue:
    """The pending jobs of one team for one flavor: one sorted list per user."""

    __slots__ = ("flavor", "heads", "jobs", "sorted", "team", "version")

    def __init__(self, team: str, flavor: str) -> None:
        self.team = team
        self.flavor = flavor
        self.jobs: dict[str, list[PendingJob]] = {}  # user -> jobs, best last (popped cheaply)
        self.sorted = False  # whether `jobs` is in order already (users by name, each list)
        self.heads: list[tuple[JobKey, str]] = []  # one entry per user with jobs left
        self.version = 0


class Order:
    """Yields pending jobs one by one in the order of the rules above.

    The caller processes each job (admitting it or not) before asking for the next one, so the
    keys are read from the ledger at that moment. `touch` re-reads a team whose usage changed
    behind the order's back (a victim team losing GPUs to a preemption).
    """

    def __init__(
        self,
        snapshot: Snapshot,
        ledger: Ledger,
        fair_share: Mapping[tuple[str, str], int],
        weights: Mapping[tuple[str, str], float],
        starving_after: float,
        min_one_job: bool = False,
        queues: Mapping[tuple[str, str], QueueJobs] | None = None,
        balance: Mapping[tuple[str, str], float] | None = None,
        slice_seconds: float = 0.0,
        horizon: Horizon | None = None,
        never: NeverAdmits | None = None,
        guarantees: Mapping[tuple[str, str], int] | None = None,
        turns: bool = False,
    ) -> None:
        """`queues`: the pending jobs per (team, flavor) when the caller has grouped them (the
        order depends neither on the order of the jobs in the snapshot nor on that of the
        queues). `balance`: the snapshot's `share_balance`, with `slice_seconds`
        (Policy.share_slice_seconds). `never`: the engine's test for jobs that can never start
        (made from the snapshot when a queue first needs it if not given). `guarantees`: per
        (team, flavor), for the owed teams' turn (none: no team has one). `turns`: whether
        teams' turns are found (rule 1b)."""
        self._ledger = ledger
        self._fair_share = fair_share
        self._weights = weights
        self._queues: dict[tuple[str, str], _Queue] = {}
        self._heap: list[tuple[TeamKey, int, tuple[str, str]]] = []
        self.starving: list[PendingJob] = []
        # Jobs starving by the balance rule (rule 1): they may reclaim beyond their share.
        self.owed: set[int] = set()
        # Rule 1b: (team, flavor) -> the job with the team's turn.
        self.turns: dict[tuple[str, str], PendingJob] = {}
        horizon = horizon or Horizon(snapshot.now)
        starved = horizon.passed  # whether the clock has reached a time
        guarantees = guarantees or {}
        first: set[int] = set()  # owed jobs of teams with no guarantee of the flavor: first
        if queues is None:
            grouped: dict[tuple[str, str], list[PendingJob]] = {}
            for job in snapshot.pending:
                grouped.setdefault((job.team, job.flavor), []).append(job)
            queues = {key: QueueJobs(jobs) for key, jobs in grouped.items()}
        oldest: dict[tuple[str, str], PendingJob] = {}  # of teams that hold nothing (min_one_job)
        # Per flavor, the GPUs that teams below their guarantee ask within it (their claims):
        # an owed team without a guarantee goes first only on what free GPUs the claims leave.
        claims: dict[str, int] = {}
        starving = self.starving
        for key, facts in queues.items():
            team, flavor = key
            # The ledger does not change while the order is built.
            in_use = ledger.in_use(team, flavor)
            within = guarantees.get(key, 0) - in_use
            if facts.smallest <= within:
                claims[flavor] = claims.get(flavor, 0) + min(within, facts.gpus)
            room = fair_share.get(key, 0) - in_use
            holds_nothing = min_one_job and in_use == 0
            by_balance = holds_nothing and balance is not None
            queue = self._queues[key] = _Queue(team, flavor)
            users = queue.jobs
            due = starved(facts.oldest + starving_after)
            top: int | None = None
            if turns and due:
                if never is None:
                    never = NeverAdmits.of(snapshot)
                top = facts.top_priority(never)
                if top is not None:
                    turn = facts.turn(top)
                    if not never(turn) and starved(turn.submitted_at + starving_after):
                        self.turns[key] = turn
            # Most queues of a busy cycle have no starving job: the team is at its fair share
            # (no job fits the room) or nothing has waited long enough. Their jobs are only
            # grouped by user and sorted, which the queue's facts have done already.
            fits_room = holds_nothing or facts.smallest <= room
            if not fits_room or (not holds_nothing and not due):
                users.update(facts.by_user())
                queue.sorted = True
                continue
            if never is None:
                never = NeverAdmits.of(snapshot)
            if top is None:
                top = facts.top_priority(never)
            for job in facts.jobs:
                at_top = job.priority == top
                waited = at_top and starved(job.submitted_at + starving_after)
                if waited and job.gpus <= room and not never(job):
                    starving.append(job)
                    continue
                if (
                    holds_nothing
                    and at_top
                    and (job.gpus > room if by_balance else waited)
                    and not never(job)
                ):
                    other = oldest.get(key)
                    if other is None or starving_key(job) < starving_key(other):
                        oldest[key] = job
                jobs = users.get(job.user)
                if jobs is None:
                    users[job.user] = [job]
                else:
                    jobs.append(job)
        if oldest:
            # Only when the team has no other starving job: that one will give it GPUs.
            teams_starving = {(job.team, job.flavor) for job in self.starving}
            for key, job in oldest.items():
                if key not in teams_starving:
                    if balance is not None:
                        if horizon.below(balance, key, -slice_seconds / 2 * job.gpus):
                            continue  # in debt: it waits for its balance to recover
                        if not guarantees.get(key):
                            claim = claims.get(key[1], 0)
                            if claim and not _starts_beyond(ledger, job, claim):
                                continue  # the claims need what is free: they come first
                            first.add(job.id)
                        self.owed.add(job.id)
                    self.starving.append(job)
                    self._take(key, job)
        self.starving.sort(key=lambda job: (job.id not in first, *starving_key(job)))
        for key in sorted(self._queues):
            queue = self._queues[key]
            if not queue.jobs:
                del self._queues[key]  # every job of the queue is starving
                continue
            for user in queue.jobs if queue.sorted else sorted(queue.jobs):
                jobs = queue.jobs[user]
                if not queue.sorted:
                    # job_key with the same user usage for every job (it is one user's list),
                    # best last: the job's rank, made with the job, read by one C-level sort.
                    jobs.sort(key=_RANK, reverse=True)
                used = ledger.user_used.get((queue.team, user, queue.flavor), 0)
                queue.heads.append((job_key(jobs[-1], used), user))
            heapq.heapify(queue.heads)
            self.touch(*key)

    def _take(self, key: tuple[str, str], job: PendingJob) -> None:
        """Take a job that starves by an exception out of its queue."""
        jobs = self._queues[key].jobs[job.user]
        jobs.remove(job)
        if not jobs:
            del self._queues[key].jobs[job.user]

    def touch(self, team: str, flavor: str) -> None:
        queue = self._queues.get((team, flavor))
        if queue is None or not queue.heads:
            return
        queue.version += 1
        key = team_key(
            self._ledger.in_use(team, flavor),
            self._fair_share.get((team, flavor), 0),
            self._weights.get((team, flavor), 0.0),
            team,
            flavor,
        )
        heapq.heappush(self._heap, (key, queue.version, (team, flavor)))

    def __iter__(self) -> Iterator[PendingJob]:
        yield from self.starving
        yield from self.queued()

    def queued(self) -> Iterator[PendingJob]:
        """The jobs after the starving ones (`__iter__` without `starving`)."""
        for run in self.runs():
            yield run.pop()

    def runs(self) -> Iterator[list[PendingJob]]:
        """The jobs after the starving ones, as runs: lists of one user's jobs that come next,
        best last. The caller takes at least one job from the end of a run (`pop`), and asks
        for the next run once the ledger changed (its stamp moved) or the run is empty: until
        then nothing re-keys a team or a user, so the same queue stays first and, of several
        users, the same one until its next job's key passes the next user's head. Jobs left in
        a run stay in the order. (A run, not a job at a time: most jobs of a busy cycle change
        nothing.)"""
        heap = self._heap
        queues = self._queues
        ledger = self._ledger
        used = ledger.used
        leaving = ledger.leaving
        milli = ledger.used_milli  # fractional jobs' thousandths (shared_gpus.py), if any
        while heap:
            key, version, qkey = heap[0]
            queue = queues[qkey]
            heads = queue.heads
            if version != queue.version or not heads:
                heapq.heappop(heap)  # a stale entry: the queue was re-keyed or emptied since
                continue
            # `Ledger.in_use`, read straight from its tables (qkey is (team, flavor)): whether
            # the team's usage is still what it was keyed with. If not (a starving job of the
            # team was admitted first): one job, then the team is re-keyed below.
            held = used.get(qkey, 0) - leaving.get(qkey, 0)
            if milli:
                held += -(-milli.get(qkey, 0) // 1000)
            keyed = held == key[2]
            if len(heads) == 1:
                # One user with jobs left: its list is already in order and no key between
                # users needs computing (the entry is replaced before it is compared again).
                jobs = queue.jobs[heads[0][1]]
                yield jobs if keyed else [jobs.pop()]
                if not jobs:
                    heads.pop()
            else:
                _, user = heapq.heappop(heads)
                jobs = queue.jobs[user]
                if keyed:
                    # Its first job, and those after it whose keys still come before the next
                    # user's head (as keyed), taken off its list once the caller is done.
                    user_used = ledger.user_used.get((queue.team, user, queue.flavor), 0)
                    first = _first_before(jobs, user_used, heads[0][0])
                    run = jobs[first:]
                    yield run
                    del jobs[first + len(run) :]
                else:
                    yield [jobs.pop()]
                # The caller has now admitted the jobs or not; re-key the user.
                if jobs:
                    user_used = ledger.user_used.get((queue.team, user, queue.flavor), 0)
                    heapq.heappush(heads, (job_key(jobs[-1], user_used), user))
            # Re-key the team only if its usage moved (most jobs of a busy cycle change
            # nothing).
            if heads:
                held = used.get(qkey, 0) - leaving.get(qkey, 0)
                if milli:
                    held += -(-milli.get(qkey, 0) // 1000)
                if held != key[2]:
                    self.touch(queue.team, queue.flavor)
