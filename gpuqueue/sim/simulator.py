"""The discrete-event replay: arrivals, admission cycles, completions and preemptions in
virtual time, around any `SchedulingPolicy` (the gpuqueue engine or a baseline)."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuqueue import native
from gpuqueue.scheduler.model import Placement, Policy, Team
from gpuqueue.sim.cluster import Cluster
from gpuqueue.sim.jobs import SimJob
from gpuqueue.sim.ledger import Ledger
from gpuqueue.sim.metrics import Recorder, Series, summarize, team_table
from gpuqueue.sim.policies import SchedulingPolicy, make_policy
from gpuqueue.sim.run import JobRun

# Event kinds, in the order they are handled at the same instant: GPUs are given back before
# new work arrives, and the cycle at that instant sees both.
_FINISH = 0
_STOP = 1  # a preempted job's checkpoint grace is over


@dataclass(frozen=True, slots=True)
class SimConfig:
    # Admission cycles run on this grid, when something changed: the live service's beat
    # period. A minute batches the trace's events enough for the full Philly replay to be fast.
    cycle_interval: float = 60.0
    # While jobs wait and nothing changes, a time-dependent policy (the engine's starvation
    # guard, minimum runtimes) still gets a cycle this often. 0 turns it off.
    idle_cycle_interval: float = 600.0
    checkpoint_grace: float = 60.0  # a preempted job keeps its GPUs this long
    # A job saves its progress every this many seconds of running; on preemption the work
    # since the last save is lost. 0: it never saves and loses the whole run.
    checkpoint_interval: float = 1800.0
    sample_interval: float = 600.0  # time series and fairness samples
    record_segments: bool = False  # keep every (job, node, GPUs, start, end), for checks
    until: float | None = None  # stop the replay at this virtual time (None: when all is done)
    engine_policy: Policy = field(default_factory=Policy)
    # The engine policy's shortcuts (see GpuqueueEngine): pending jobs per team shown to the
    # engine (None: all), and no cycle for an arrival that cannot change the plan.
    window: int | None = 16
    skip_idle_changes: bool = True
    # Pass a requeued job to the engine as submitted when it was requeued (losing its place).
    requeue_at_back: bool = False
    # Measure the estimated start's honesty every this many seconds (gpuqueue/sim/honesty.py;
    # gpuqueue policy only). None: off, it costs a forecast per sample.
    forecast_every: float | None = None
    # Every gang of several workers asks for one domain of this topology level of the cluster
    # spec ("rack" or "block", cluster.LEVELS; gpuqueue policy only), preferred or required.
    gang_level: str = ""
    gang_level_required: bool = False


@dataclass(frozen=True, slots=True)
class Segment:
    """GPUs of one node held by one job over [start, end)."""

    job_id: int
    node: str
    gpus: int
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Anomaly:
    """A decision the simulator refused or flagged: the first few are kept with details."""

    time: float
    job_id: int
    kind: str  # "invalid_placement", "over_limit", "half_placed_gang", "bad_preemption"
    detail: str


@dataclass(slots=True)
class Result:
    policy: str
    summary: dict[str, object]
    teams: list[dict[str, object]]
    series: Series
    runs: list[JobRun]
    segments: list[Segment]
    anomalies: dict[str, int]
    anomaly_examples: list[Anomaly]
    wall_seconds: float
    cycles: int

    def to_json(self) -> dict[str, object]:
        """Everything but the per-job state and segments, for `--out results.json`."""
        return {
            "policy": self.policy,
            "summary": self.summary,
            "teams": self.teams,
            "anomalies": self.anomalies,
            "anomaly_examples": [
                {"time": a.time, "job_id": a.job_id, "kind": a.kind, "detail": a.detail}
                for a in self.anomaly_examples
            ],
            "series": {
                "time": self.series.time,
                "allocated": self.series.allocated,
                "idle_held": self.series.idle_held,
                "pending_jobs": self.series.pending_jobs,
                "pending_gpus": self.series.pending_gpus,
            },
        }


@dataclass(frozen=True, slots=True)
class Progress:
    now: float
    end: float  # the last submission; virtual time runs past it while the queue drains
    finished: int
    jobs: int
    pending: int
    wall_seconds: float


ProgressCallback = Callable[[Progress], None]


class _Replay:
    """One replay's mutable state; `simulate` is its only user."""

    def __init__(
        self,
        jobs: Sequence[SimJob],
        cluster: Cluster,
        teams: Sequence[Team],
        policy: str | Callable[[Ledger], SchedulingPolicy],
        config: SimConfig,
        on_progress: ProgressCallback | None,
    ) -> None:
        self.config = config
        self.jobs = sorted(jobs, key=lambda j: (j.submitted_at, j.id))
        self.ledger = Ledger(cluster)
        if callable(policy):
            self.policy = policy(self.ledger)
        else:
            self.policy = make_policy(
                policy,
                self.ledger,
                cluster,
                teams,
                config.engine_policy,
                window=config.window,
                skip_idle_changes=config.skip_idle_changes,
                requeue_at_back=config.requeue_at_back,
                forecast_every=config.forecast_every,
                gang_level=config.gang_level,
                gang_level_required=config.gang_level_required,
            )
        self.limits = {(t.id, f): q.limit for t in teams for f, q in t.quotas.items()}
        self.team_used: dict[tuple[str, str], int] = {}
        self.runs: dict[int, JobRun] = {}
        self.events: list[tuple[float, int, int, int, int]] = []  # time, kind, seq, job, epoch
        self.seq = 0
        last_submit = self.jobs[-1].submitted_at if self.jobs else 0.0
        self.recorder = Recorder(cluster, teams, config.sample_interval, last_submit)
        self.segments: list[Segment] = []
        self.anomalies: dict[str, int] = {}
        self.anomaly_examples: list[Anomaly] = []
        self.on_progress = on_progress
        self.finished = 0
        self.pending = 0
        self.cycles = 0
        self._changed_last_cycle = True  # whether the last cycle placed or preempted anything

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> Result:
        """Advance virtual time event by event.

        1. Take the earliest of: the next submission, the next completion or end of a
           checkpoint grace, and the next admission cycle.
        2. Events at the same instant are all handled before that instant's cycle.
        3. A cycle is due on the next `cycle_interval` grid point after anything changed; while
           jobs wait and nothing changes, a time-dependent policy still gets one every
           `idle_cycle_interval`.
        4. The replay ends when no event is left and the last cycle changed nothing (the jobs
           still pending then can never start: too big, or gangs deadlocked).
        """
        wall_start = time.perf_counter()
        interval = self.config.cycle_interval
        idle = self.config.idle_cycle_interval if self.policy.time_dependent else 0.0
        next_arrival = 0
        next_cycle = math.inf
        last_cycle = -math.inf
        last_report = wall_start
        inf = math.inf
        while True:
            t_arrival = (
                self.jobs[next_arrival].submitted_at if next_arrival < len(self.jobs) else inf
            )
            t_event = min(t_arrival, self.events[0][0] if self.events else inf)
            t_cycle = next_cycle
            if (
                t_cycle == inf
                and idle
                and self.pending
                and (t_event < inf or self._changed_last_cycle)
            ):
                t_cycle = max(last_cycle + idle, self.recorder.now)
            if self.config.until is not None and min(t_cycle, t_event) > self.config.until:
                break
            if t_cycle < t_event:
                self.recorder.advance(t_cycle)
                self._cycle(t_cycle)
                last_cycle = t_cycle
                next_cycle = inf
                continue
            if t_event == inf:
                break
            self.recorder.advance(t_event)
            while next_arrival < len(self.jobs) and self.jobs[next_arrival].submitted_at == t_event:
                self._arrive(self.jobs[next_arrival], t_event)
                next_arrival += 1
            while self.events and self.events[0][0] == t_event:
                _, kind, _, job_id, epoch = heapq.heappop(self.events)
                run = self.runs[job_id]
                if epoch != run.epoch:
                    continue  # a completion that a preemption overtook, or the other way round
                if kind == _FINISH:
                    self._finish(run, t_event)
                else:
                    self._stop(run, t_event)
            if next_cycle == inf and self.policy.wants_cycle():
                next_cycle = self._grid(t_event, interval)
            if self.on_progress is not None:
                wall = time.perf_counter()
                if wall - last_report >= 2.0:
                    last_report = wall
                    self._report(t_event, wall - wall_start)
        if self.config.until is not None:
            self.recorder.advance(self.config.until + 1e-6)  # take the samples up to `until`
        wall = time.perf_counter() - wall_start
        if self.on_progress is not None:
            self._report(self.recorder.now, wall)
        runs = [self.runs[j.id] for j in self.jobs]
        summary = summarize(runs, self.recorder, self.recorder.now)
        summary["wall_s"] = round(wall, 3)
        summary["native"] = native.active()  # compiled with `make native` (gpuqueue/native.py)
        summary["cycles"] = self.cycles
        summary.update(self.policy.stats())
        for anomaly, count in sorted(self.anomalies.items()):
            summary[anomaly] = count
        return Result(
            policy=self.policy.name,
            summary=summary,
            teams=team_table(runs, self.recorder),
            series=self.recorder.series,
            runs=runs,
            segments=self.segments,
            anomalies=dict(self.anomalies),
            anomaly_examples=self.anomaly_examples,
            wall_seconds=wall,
            cycles=self.cycles,
        )

    @staticmethod
    def _grid(t: float, interval: float) -> float:
        return t if interval <= 0 else math.ceil(t / interval) * interval

    def _report(self, now: float, wall: float) -> None:
        assert self.on_progress is not None
        end = self.jobs[-1].submitted_at if self.jobs else 0.0
        self.on_progress(Progress(now, end, self.finished, len(self.jobs), self.pending, wall))

    # --- events --------------------------------------------------------------------------

    def _push(self, t: float, kind: int, run: JobRun) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, run.job.id, run.epoch))

    def _arrive(self, job: SimJob, now: float) -> None:
        run = JobRun(job=job, remaining=job.duration, enqueued_at=now)
        self.runs[job.id] = run
        self._enqueue(run, now)

    def _enqueue(self, run: JobRun, now: float) -> None:
        run.enqueued_at = now
        self.pending += 1
        self.recorder.pending(run, +1)
        self.policy.submitted(run, now)

    def _release(self, run: JobRun, now: float) -> None:
        job = run.job
        placement = run.placement_tuple()
        self.ledger.give_back(placement, job.flavor, job.gpus_per_worker)
        self.recorder.hold(run, -job.gpus)
        self.recorder.run(-job.gpus)
        key = (job.team, job.flavor)
        self.team_used[key] -= job.gpus
        if self.config.record_segments:
            for node, gpus, taken_at in run.fragments:
                self.segments.append(Segment(job.id, node, gpus, taken_at, now))
            run.fragments = []
        run.placement = {}
        run.placed_workers = 0
        run.started_at = None
        run.held_since = None
        run.preempting_since = None
        run.epoch += 1

    def _finish(self, run: JobRun, now: float) -> None:
        self._release(run, now)
        run.remaining = 0.0
        run.finished_at = now
        self.finished += 1
        self.policy.stopped(run, now)

    def _stop(self, run: JobRun, now: float) -> None:
        """A preempted job stops: it keeps what it last saved and is requeued in its place."""
        assert run.started_at is not None
        ran = now - run.started_at
        every = self.config.checkpoint_interval
        saved = min(math.floor(ran / every) * every if every > 0 else 0.0, run.remaining)
        run.lost_gpu_seconds += (ran - saved) * run.job.gpus
        run.remaining -= saved
        run.preemptions += 1
        self._release(run, now)
        self.policy.stopped(run, now)
        self._enqueue(run, now)

    # --- cycles --------------------------------------------------------------------------

    def _cycle(self, now: float) -> None:
        self.cycles += 1
        decision = self.policy.cycle(now)
        changed = False
        for job_id, placement in decision.placements:
            changed |= self._place(job_id, placement, now)
        for job_id, reason in decision.preemptions:
            changed |= self._preempt(job_id, reason, now)
        self._changed_last_cycle = changed

    def _anomaly(self, now: float, job_id: int, kind: str, detail: str) -> None:
        self.anomalies[kind] = self.anomalies.get(kind, 0) + 1
        if len(self.anomaly_examples) < 20:
            self.anomaly_examples.append(Anomaly(now, job_id, kind, detail))

    def _place(self, job_id: int, placement: Placement, now: float) -> bool:
        """Check a placement against the ledger and apply it; start the job once whole.

        1. Refuse what does not fit (unknown job, job not pending, node too full): the
           decision is recorded as an anomaly and the job stays pending.
        2. Flag what breaks a rule but can be applied: a team past its limit, a gang policy
           placing part of a gang.
        3. Take the GPUs; when the gang is whole, start it and schedule its completion.
        """
        run = self.runs.get(job_id)
        if run is None or run.running or run.finished_at is not None:
            self._anomaly(now, job_id, "invalid_placement", "job is not pending")
            return False
        job = run.job
        workers = sum(w for _, w in placement)
        why = self.ledger.check(placement, job.flavor, job.gpus_per_worker)
        if why is None and run.placed_workers + workers > job.workers:
            why = f"{run.placed_workers + workers} workers placed, the job has {job.workers}"
        if why is not None:
            self._anomaly(now, job_id, "invalid_placement", why)
            return False
        key = (job.team, job.flavor)
        gpus = workers * job.gpus_per_worker
        used = self.team_used.get(key, 0) + gpus
        if self.policy.uses_quotas and used > self.limits.get(key, 0):
            self._anomaly(now, job_id, "over_limit", f"team {job.team} would hold {used} GPUs")
        if self.policy.gangs and run.placed_workers + workers < job.workers:
            self._anomaly(
                now, job_id, "half_placed_gang", f"{workers} of {job.workers} workers placed"
            )
        self.ledger.take(placement, job.flavor, job.gpus_per_worker)
        self.team_used[key] = used
        self.recorder.hold(run, gpus)
        for node, w in placement:
            run.placement[node] = run.placement.get(node, 0) + w
            if self.config.record_segments:
                run.fragments.append((node, w * job.gpus_per_worker, now))
        run.placed_workers += workers
        if run.placed_workers < job.workers:
            if run.held_since is None:
                run.held_since = now
                run.held_incomplete = True
            self.policy.placed(run, now)
            return True
        run.started_at = now
        if run.first_start is None:
            run.first_start = now
        run.waited += now - run.enqueued_at
        self.pending -= 1
        self.recorder.pending(run, -1)
        self.recorder.run(job.gpus)
        self._push(now + run.remaining, _FINISH, run)
        self.policy.started(run, now)
        return True

    def _preempt(self, job_id: int, reason: str, now: float) -> bool:
        run = self.runs.get(job_id)
        if run is None or not run.running or run.preempting_since is not None:
            self._anomaly(now, job_id, "bad_preemption", f"{reason}: job is not running")
            return False
        if not run.job.preemptible:
            self._anomaly(now, job_id, "bad_preemption", f"{reason}: job is not preemptible")
            return False
        run.preempting_since = now
        self._push(now + self.config.checkpoint_grace, _STOP, run)
        self.policy.preempting(run, now)
        return True


def simulate(
    jobs: Sequence[SimJob],
    cluster: Cluster,
    teams: Sequence[Team],
    policy: str | Callable[[Ledger], SchedulingPolicy] = "gpuqueue",
    config: SimConfig | None = None,
    on_progress: ProgressCallback | None = None,
) -> Result:
    """Replay `jobs` on `cluster` under `policy`, with `teams`' quotas, in virtual time.

    `policy` is a name from `gpuqueue.sim.policies.POLICIES` or a factory taking the ledger.
    The replay is deterministic: same inputs, same result (only `wall_seconds` differs).
    """
    return _Replay(jobs, cluster, teams, policy, config or SimConfig(), on_progress).run()
