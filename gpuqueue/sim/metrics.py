"""Measurements of a replay: integrals of GPU use over time, samples for plots and fairness,
and the per-run summary (delays, completion times, allocation, fairness, waste)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuqueue.scheduler.model import Quota, Team
from gpuqueue.scheduler.usage import entitled_shares
from gpuqueue.sim.cluster import Cluster
from gpuqueue.sim.fairness import jain
from gpuqueue.sim.jobs import SimJob
from gpuqueue.sim.run import JobRun

TeamFlavor = tuple[str, str]


@dataclass(slots=True)
class Series:
    """Samples taken every `sample_interval` seconds of virtual time, for plots."""

    time: list[float] = field(default_factory=list)
    allocated: list[int] = field(default_factory=list)  # GPUs held (running or waiting gangs)
    idle_held: list[int] = field(default_factory=list)  # GPUs held by incomplete gangs
    pending_jobs: list[int] = field(default_factory=list)
    pending_gpus: list[int] = field(default_factory=list)


class Recorder:
    """Follows the replay's state and integrates it over virtual time.

    The simulator calls `advance(now)` before every change; state is constant in between, so
    integrals are exact and samples at grid times see the state that held at that instant.
    """

    def __init__(
        self, cluster: Cluster, teams: Sequence[Team], sample_interval: float, window_end: float
    ) -> None:
        self.capacity = {f: cluster.capacity(f) for f in cluster.flavors}
        self.total_capacity = cluster.capacity()
        self.quotas: dict[str, dict[str, Quota]] = {
            f: {t.id: t.quotas[f] for t in teams if f in t.quotas} for f in cluster.flavors
        }
        self.sample_interval = sample_interval
        self.window_end = window_end  # the last submission: offered load applies before it
        self.now = 0.0
        self.next_sample = 0.0
        self.held = 0
        self.running = 0
        self.held_by: dict[TeamFlavor, int] = defaultdict(int)
        self.pending_jobs = 0
        self.pending_gpus = 0
        self.pending_by: dict[TeamFlavor, int] = defaultdict(int)
        self.pending_sizes: dict[TeamFlavor, Counter[int]] = defaultdict(Counter)
        # Integrals, in GPU-seconds.
        self.held_gs = 0.0
        self.held_in_window_gs = 0.0
        self.idle_held_gs = 0.0
        self.team_held_gs: dict[str, float] = defaultdict(float)
        # Fairness under contention, per team: what it got and what it was entitled to.
        self.contended_seconds = 0.0
        self.received_gs: dict[str, float] = defaultdict(float)
        self.entitled_gs: dict[str, float] = defaultdict(float)
        self.violation_seconds: dict[str, float] = defaultdict(float)
        self.series = Series()

    # --- state changes -------------------------------------------------------------------

    def pending(self, run: JobRun, sign: int) -> None:
        key = (run.job.team, run.job.flavor)
        self.pending_jobs += sign
        self.pending_gpus += sign * run.job.gpus
        self.pending_by[key] += sign * run.job.gpus
        self.pending_sizes[key][run.job.gpus] += sign

    def hold(self, run: JobRun, gpus: int) -> None:
        """`gpus` more (or fewer, when negative) GPUs held by the job, complete or not."""
        self.held += gpus
        self.held_by[(run.job.team, run.job.flavor)] += gpus

    def run(self, gpus: int) -> None:
        self.running += gpus

    # --- time ----------------------------------------------------------------------------

    def advance(self, now: float) -> None:
        if now <= self.now:
            return
        while self.next_sample < now:
            self._sample(self.next_sample)
            self.next_sample += self.sample_interval
        dt = now - self.now
        self.held_gs += self.held * dt
        self.idle_held_gs += (self.held - self.running) * dt
        if self.now < self.window_end:
            self.held_in_window_gs += self.held * (min(now, self.window_end) - self.now)
        for (team, _), gpus in self.held_by.items():
            if gpus:
                self.team_held_gs[team] += gpus * dt
        self.now = now

    def _sample(self, t: float) -> None:
        s = self.series
        s.time.append(t)
        s.allocated.append(self.held)
        s.idle_held.append(self.held - self.running)
        s.pending_jobs.append(self.pending_jobs)
        s.pending_gpus.append(self.pending_gpus)
        if self.pending_jobs:
            self._fairness(self.sample_interval)

    def _fairness(self, dt: float) -> None:
        """Credit one sample's worth of entitlement and of guarantee violations.

        1. A flavor is contended when its teams ask for more than it has.
        2. Under contention each asking team is entitled to its max-min fair share
           (`entitled_shares`), and we credit what it holds against that.
        3. A team waits in violation of its guarantee when a pending job of it would fit within
           its guarantee while another team holds more than its own guarantee.
        """
        for flavor, capacity in self.capacity.items():
            quotas = self.quotas[flavor]
            demand = {t: self.held_by[(t, flavor)] + self.pending_by[(t, flavor)] for t in quotas}
            borrowing = {t for t in quotas if self.held_by[(t, flavor)] > quotas[t].guarantee}
            for t, q in quotas.items():
                key = (t, flavor)
                if self.pending_by[key] <= 0 or not (borrowing - {t}):
                    continue
                smallest = min((g for g, n in self.pending_sizes[key].items() if n > 0), default=0)
                if smallest and self.held_by[key] + smallest <= q.guarantee:
                    self.violation_seconds[t] += dt
            if sum(demand.values()) <= capacity:
                continue
            self.contended_seconds += dt
            for t, e in entitled_shares(capacity, demand, quotas).items():
                if e > 0:
                    self.entitled_gs[t] += e * dt
                    self.received_gs[t] += min(self.held_by[(t, flavor)], demand[t]) * dt


def _percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize(runs: Sequence[JobRun], recorder: Recorder, end: float) -> dict[str, object]:
    """The numbers of a run, as plain JSON-ready values (seconds, GPU-hours, fractions)."""
    started = [r for r in runs if r.first_start is not None]
    # Each started job with its queueing delay, made once for every figure that reads delays.
    job_delays = [
        (r.job, r.first_start - r.job.submitted_at) for r in runs if r.first_start is not None
    ]
    delays = sorted(d for _, d in job_delays)
    ends = [(r.finished_at, r.job.submitted_at) for r in runs if r.finished_at is not None]
    jcts = [end - submitted for end, submitted in ends]
    first_submit = min((r.job.submitted_at for r in runs), default=0.0)
    last_finish = max((end for end, _ in ends), default=first_submit)
    window = max(recorder.window_end - first_submit, 1e-9)
    makespan = max(last_finish - first_submit, 1e-9)
    cap = recorder.total_capacity
    ratios = {
        t: recorder.received_gs[t] / e for t, e in sorted(recorder.entitled_gs.items()) if e > 0
    }
    return {
        "jobs": len(runs),
        "jobs_started": len(started),
        "jobs_finished": len(ends),
        "gpus": cap,
        "delay_mean_s": _mean(delays),
        "delay_median_s": _percentile(delays, 50),
        "delay_p95_s": _percentile(delays, 95),
        "delay_max_s": delays[-1] if delays else 0.0,
        "delay_work_weighted_mean_s": work_weighted_delay(job_delays),
        "delay_mean_by_shape_s": delay_by_shape(job_delays),
        "wait_mean_s": _mean([r.waited for r in started]),
        "jct_mean_s": _mean(jcts),
        "makespan_s": makespan if ends else 0.0,
        "alloc_mean": recorder.held_in_window_gs / (cap * window),
        "alloc_mean_makespan": recorder.held_gs / (cap * makespan),
        "gpu_hours_held": recorder.held_gs / 3600,
        "gpu_hours_idle_in_gangs": recorder.idle_held_gs / 3600,
        "jobs_held_incomplete": sum(1 for r in runs if r.held_incomplete),
        "preemptions": sum(r.preemptions for r in runs),
        "gpu_hours_lost": sum(r.lost_gpu_seconds for r in runs) / 3600,
        "contended_hours": recorder.contended_seconds / 3600,
        "jain": jain(list(ratios.values())),
        # The same over teams with at least 1 % of the contended entitlement: a team of three
        # jobs that cannot fit its gang moves the plain index as much as the largest team.
        "jain_major_teams": jain(
            [
                ratio
                for t, ratio in ratios.items()
                if recorder.entitled_gs[t] >= 0.01 * sum(recorder.entitled_gs.values())
            ]
        ),
        "guarantee_violation_team_hours": sum(recorder.violation_seconds.values()) / 3600,
        "end_s": end,
    }


def work_weighted_delay(job_delays: Sequence[tuple[SimJob, float]]) -> float:
    """Mean queueing delay with each job counted in proportion to its GPU-time.

    The per-job mean is a mean over jobs, so a trace whose jobs are mostly one-GPU (93 % of
    Philly's) makes it a mean of one-GPU jobs: a policy lowers it by letting those pass the big
    gangs. Weighted by work, it reads what an average GPU-hour of demand waits (Feitelson's
    area-weighted response time), which no job shape can dominate by its count alone.
    """
    total = math.fsum(job.gpu_seconds for job, _ in job_delays)
    if total <= 0:
        return 0.0
    return math.fsum(delay * job.gpu_seconds for job, delay in job_delays) / total


def delay_by_shape(job_delays: Sequence[tuple[SimJob, float]]) -> dict[str, float]:
    """Mean queueing delay of one-GPU jobs, of larger single-worker jobs and of multi-worker
    gangs: which jobs a policy makes wait (a shape with no started job is left out)."""
    by: dict[str, list[float]] = defaultdict(list)
    for job, delay in job_delays:
        by[job_shape(job)].append(delay)
    return {shape: _mean(by[shape]) for shape in ("one_gpu", "one_worker", "gang") if by[shape]}


def job_shape(job: SimJob) -> str:
    """one_gpu, one_worker (2 GPUs or more on one node) or gang (several workers)."""
    return "gang" if job.workers > 1 else "one_gpu" if job.gpus == 1 else "one_worker"


def team_table(runs: Sequence[JobRun], recorder: Recorder) -> list[dict[str, object]]:
    """Per team: jobs, mean delay, GPU-hours held, and under contention got / entitled."""
    by_team: dict[str, list[JobRun]] = defaultdict(list)
    for r in runs:
        by_team[r.job.team].append(r)
    rows = []
    for team in sorted(by_team):
        team_runs = by_team[team]
        delays = [
            r.first_start - r.job.submitted_at for r in team_runs if r.first_start is not None
        ]
        entitled = recorder.entitled_gs.get(team, 0.0)
        rows.append(
            {
                "team": team,
                "jobs": len(team_runs),
                "delay_mean_s": _mean(delays),
                "gpu_hours_held": recorder.team_held_gs.get(team, 0.0) / 3600,
                "contended_gpu_hours_received": recorder.received_gs.get(team, 0.0) / 3600,
                "contended_gpu_hours_entitled": entitled / 3600,
                "share_of_entitlement": (
                    recorder.received_gs.get(team, 0.0) / entitled if entitled > 0 else None
                ),
                "guarantee_violation_hours": recorder.violation_seconds.get(team, 0.0) / 3600,
            }
        )
    return rows


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0
