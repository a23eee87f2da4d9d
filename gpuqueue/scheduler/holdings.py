"""Holdings: the running jobs of a snapshot counted once and kept up to date job by job.

A caller that plans again and again while a few jobs start or stop in between (the trace
replay) keeps one, and `plan(snapshot, policy, holdings=...)` starts from a copy of its ledger
instead of counting every running job again (the largest part of a busy plan's setup).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable
from typing import TypeVar

from gpuqueue.scheduler.fairshare import ShareTables
from gpuqueue.scheduler.ledger import FlavorLedger, Ledger, buckets_after
from gpuqueue.scheduler.model import Node, Quota, RunningJob, Team
from gpuqueue.scheduler.ordering import QueueMemo
from gpuqueue.scheduler.preemption import VictimIndex, victim_key
from gpuqueue.scheduler.starvation import ReleaseEvent, release_time

K = TypeVar("K")


def team_chains(teams: Iterable[Team]) -> dict[str, tuple[str, ...]]:
    """team -> (team, its department) or (team,): the groups a job's GPUs count against."""
    teams = tuple(teams)
    ids = {t.id for t in teams}
    return {
        t.id: (t.id, t.parent) if t.parent is not None and t.parent in ids else (t.id,)
        for t in teams
    }


class TeamTables:
    """What a plan reads of the teams, by key: made once per plan, or once for all the plans
    of one set of teams (`Holdings.tables`). Nothing here changes during a plan."""

    __slots__ = ("chains", "groups", "guarantees", "quotas", "shares", "weights")

    def __init__(self, teams: Iterable[Team]) -> None:
        teams = tuple(teams)
        self.chains = team_chains(teams)
        self.shares = ShareTables(teams)  # what fair_shares reads, and its last fillings
        self.quotas: dict[tuple[str, str], Quota] = {
            (t.id, flavor): quota for t in teams for flavor, quota in t.quotas.items()
        }
        self.weights = {key: quota.weight for key, quota in self.quotas.items()}
        self.guarantees = {key: quota.guarantee for key, quota in self.quotas.items()}
        # (team, flavor) -> the team and its department with their quotas (None: no quota),
        # filled as plans ask (engine._Cycle._groups).
        self.groups: dict[tuple[str, str], list[tuple[str, Quota | None]]] = {}


def _bump(table: dict[K, int], key: K, delta: int) -> None:
    value = table.get(key, 0) + delta
    if value:
        table[key] = value
    else:
        del table[key]  # the fresh ledger has no zero entries


class Holdings:
    """The running jobs in the order they were added (`jobs`), counted as `plan()` counts them.

    `ledger()` and `victim_index()` give what `Ledger(nodes, chains).hold_running(jobs)` and
    `VictimIndex(jobs)` give for those jobs in that order: the same totals, the same free GPUs,
    and the same order of nodes in each free-GPU bucket, which placement follows:
    1. nodes that hold no running job keep the order of the fresh ledger (by name);
    2. the others follow, ordered by the first running job (in `jobs` order) on them, then by
       the node's place in that job's placement, as `hold_running` meets them.
    A replaced job (`replace`: a preemption started) keeps its place, as in a dict.

    Only jobs that hold GPUs are taken (at least one GPU per worker, at least one worker on each
    node of the placement): a zero count leaves traces in the fresh ledger that the totals
    kept here do not.
    """

    def __init__(self, nodes: tuple[Node, ...], teams: Iterable[Team]) -> None:
        self.nodes = nodes
        self.teams = tuple(teams)
        self.tables = TeamTables(self.teams)
        self.chains = self.tables.chains
        # What the order reads of each queue of pending jobs, kept for the next plan: a memo,
        # checked against the snapshot's jobs queue by queue (ordering.py).
        self.queues = QueueMemo()
        self.jobs: dict[int, RunningJob] = {}
        self._seq: dict[int, int] = {}  # job id -> its place in the order (grows with each add)
        self._next = 0
        self._base = Ledger(nodes, self.chains)  # no job counted: free GPUs and bucket order
        flavors = self._base.flavors
        # flavor -> node -> GPUs its running jobs hold there (only nodes of the ledger).
        self._taken: dict[str, dict[str, int]] = {f: {} for f in flavors}
        # flavor -> node -> free GPUs, and the flavor's free total, kept with `_taken`: what a
        # new ledger starts from (copied per plan instead of recounted node by node).
        self._free: dict[str, dict[str, int]] = {f: dict(fl.free) for f, fl in flavors.items()}
        self._total_free: dict[str, int] = {f: fl.total_free for f, fl in flavors.items()}
        # flavor -> node -> job id -> (the job's place, the node's place in its placement)
        self._on_node: dict[str, dict[str, dict[int, tuple[int, int]]]] = {f: {} for f in flavors}
        self._first: dict[str, dict[str, tuple[int, int]]] = {f: {} for f in flavors}
        self._incoming: dict[str, dict[str, int]] = {f: {} for f in flavors}
        # flavor -> (expected end, node, GPUs, job id) of the running jobs not being preempted,
        # sorted: the release events a reservation replays (starvation.Reserver).
        self._ends: dict[str, list[ReleaseEvent]] = {f: [] for f in flavors}
        self._leaving_jobs: dict[int, RunningJob] = {}
        self._used: dict[tuple[str, str], int] = {}
        self._leaving: dict[tuple[str, str], int] = {}
        self._nonpreemptible: dict[tuple[str, str], int] = {}
        self._user_used: dict[tuple[str, str, str], int] = {}
        self._team_used: dict[tuple[str, str], int] = {}  # the team's own jobs, no department
        # Preemptible running jobs not being preempted, per (team, flavor), by victim_key.
        self._victims: dict[tuple[str, str], list[RunningJob]] = {}
        self._buckets: dict[str, dict[int, dict[str, None]]] | None = None

    # --- changes -----------------------------------------------------------------------------

    def add(self, job: RunningJob) -> None:
        """A job starts running: it goes last in the order."""
        if job.id in self.jobs:
            raise ValueError(f"job {job.id} is held already")
        if job.gpus_per_worker <= 0 or any(workers <= 0 for _, workers in job.placement):
            raise ValueError(f"job {job.id} holds no GPUs on some node")
        self.jobs[job.id] = job
        seq = self._seq[job.id] = self._next
        self._next += 1
        self._count(job, seq, 1)

    def remove(self, job_id: int) -> RunningJob:
        """A job stops running (finished, or preempted and gone)."""
        job = self.jobs.pop(job_id)
        self._count(job, self._seq.pop(job_id), -1)
        return job

    def replace(self, job: RunningJob) -> None:
        """The same job with new fields (a preemption started): it keeps its place."""
        if job.gpus_per_worker <= 0 or any(workers <= 0 for _, workers in job.placement):
            raise ValueError(f"job {job.id} holds no GPUs on some node")
        seq = self._seq[job.id]
        self._count(self.jobs[job.id], seq, -1)
        self.jobs[job.id] = job
        self._count(job, seq, 1)

    def _count(self, job: RunningJob, seq: int, sign: int) -> None:
        self._buckets = None
        gpus = sign * job.gpus
        flavor = job.flavor
        leaving = job.preempting_since is not None
        for group in self.chains.get(job.team, (job.team,)):
            _bump(self._used, (group, flavor), gpus)
            if not job.preemptible:
                _bump(self._nonpreemptible, (group, flavor), gpus)
            if leaving:
                _bump(self._leaving, (group, flavor), gpus)
        _bump(self._user_used, (job.team, job.user, flavor), gpus)
        _bump(self._team_used, (job.team, flavor), gpus)
        if leaving:
            if sign > 0:
                self._leaving_jobs[job.id] = job
            else:
                del self._leaving_jobs[job.id]
        elif job.preemptible:
            key = (job.team, flavor)
            if sign > 0:
                insort(self._victims.setdefault(key, []), job, key=victim_key)
            else:
                victims = self._victims[key]
                del victims[bisect_left(victims, victim_key(job), key=victim_key)]
                if not victims:
                    del self._victims[key]
        taken = self._taken.get(flavor)
        if taken is None:
            return  # no schedulable node offers the flavor
        free = self._free[flavor]
        total = self._total_free[flavor]
        on_node = self._on_node[flavor]
        first = self._first[flavor]
        incoming = self._incoming[flavor]
        g = job.gpus_per_worker
        end = None if leaving else release_time(job)
        ends = self._ends[flavor]
        for place, (node, workers) in enumerate(job.placement):
            if node not in free:
                continue  # an unschedulable node
            node_gpus = sign * workers * g
            _bump(taken, node, node_gpus)
            old = free[node]
            new = free[node] = old - node_gpus
            total += (new if new > 0 else 0) - (old if old > 0 else 0)
            if leaving:
                _bump(incoming, node, node_gpus)
            elif end is not None:
                event = (end, node, workers * g, job.id)
                if sign > 0:
                    insort(ends, event)
                else:
                    del ends[bisect_left(ends, event)]
            jobs = on_node.get(node)
            if sign > 0:
                if jobs is None:
                    jobs = on_node[node] = {}
                if job.id not in jobs:  # a node twice in one placement: its first place counts
                    jobs[job.id] = (seq, place)
                    if node not in first or (seq, place) < first[node]:
                        first[node] = (seq, place)
            elif jobs is not None and job.id in jobs:
                if jobs.pop(job.id) == first[node]:
                    if jobs:
                        first[node] = min(jobs.values())
                    else:
                        del first[node]
                if not jobs:
                    del on_node[node]
        self._total_free[flavor] = total

    # --- what plan() reads -------------------------------------------------------------------

    def capacity(self) -> dict[str, int]:
        """GPUs of each flavor before any job is counted (what `plan()` calls capacity)."""
        return {name: fl.total_free for name, fl in self._base.flavors.items()}

    def running_totals(self) -> dict[tuple[str, str], int]:
        """What `Ledger.hold_running` returns: GPUs of each team's own jobs, per flavor."""
        return dict(self._team_used)

    def release_events(self) -> dict[str, list[ReleaseEvent]]:
        """flavor -> when the running jobs not being preempted are expected to give GPUs back:
        (expected end, node, GPUs, job id), sorted (shared: plan() only reads them)."""
        return self._ends

    def victim_index(self) -> VictimIndex:
        """`VictimIndex(jobs)`, sharing the sorted lists kept here (plan() only reads them)."""
        return VictimIndex.from_sorted(self._victims)

    def ledger(self) -> Ledger:
        """A new ledger, as `Ledger(nodes, chains).hold_running(jobs in order)` leaves it."""
        ledger = Ledger((), self.chains)
        ledger.used = dict(self._used)
        ledger.leaving = dict(self._leaving)
        ledger.nonpreemptible = dict(self._nonpreemptible)
        ledger.user_used = dict(self._user_used)
        if self._buckets is None:
            self._buckets = {name: self._order(name) for name in self._base.flavors}
        flavors = ledger.flavors
        for name, base in self._base.flavors.items():
            fl = flavors[name] = FlavorLedger(name)
            fl.max_node = base.max_node
            fl.total_capacity = base.total_capacity
            fl.free = dict(self._free[name])
            fl.total_free = self._total_free[name]
            fl.buckets = {count: dict(nodes) for count, nodes in self._buckets[name].items()}
            fl.incoming = dict(self._incoming[name])
        if self._leaving_jobs:
            incoming_jobs = ledger.incoming_jobs
            seq = self._seq
            for job in sorted(self._leaving_jobs.values(), key=lambda j: seq[j.id]):
                held = flavors.get(job.flavor)
                if held is None:
                    continue
                for node, _ in job.placement:
                    if node in held.free:
                        incoming_jobs.setdefault((job.flavor, node), []).append(job.id)
        return ledger

    def _order(self, flavor: str) -> dict[int, dict[str, None]]:
        """The free-GPU buckets of a flavor with their nodes in `take_all`'s order."""
        base = self._base.flavors[flavor]
        taken = self._taken[flavor]
        free = base.free
        moved = {
            node: free[node] - taken[node]
            for node in sorted(taken, key=self._first[flavor].__getitem__)
        }
        return buckets_after(base.buckets, moved)
