"""What a replay's policies know of runtimes: predictions from the jobs finished so far.

The replay feeds `RuntimeHistory` (gpuqueue/scheduler/prediction.py) as jobs finish, the way the
service feeds it from finished jobs in PostgreSQL, so a prediction only ever sees the past. A
prediction is what the history says at the moment it is asked, as in the service, which reads
its history again about once a cycle (services/forecasts/runtime_history.py): a job that waited
for days starts, and is forecast, with what the jobs finished meanwhile say. (The gpuqueue policy
reads a pending job's runtime once, when it is queued: see GpuqueueEngine.) A running job that
outlives its prediction gets a new one, given how long it has run (`Prediction.remaining`):
`overdue` finds those in a heap of predicted ends.
"""

from __future__ import annotations

import heapq

from gpuqueue.scheduler.model import UNKNOWN_RUNTIME
from gpuqueue.scheduler.prediction import JobFacts, Prediction, RuntimeHistory
from gpuqueue.sim.jobs import SimJob
from gpuqueue.sim.run import JobRun

# Before the flavor has any finished job: the engine's default for an unknown runtime.
DEFAULT_RUNTIME = UNKNOWN_RUNTIME


def facts(job: SimJob) -> JobFacts:
    return JobFacts(
        user=job.user or job.team,
        team=job.team,
        flavor=job.flavor,
        workers=job.workers,
        gpus_per_worker=job.gpus_per_worker,
    )


class ReplayRuntimes:
    """Predicted remaining runtimes at quantile `q`, learnt online from finished jobs."""

    def __init__(self, q: float = 0.5, history: RuntimeHistory | None = None) -> None:
        self.q = q
        self.history = history or RuntimeHistory()
        # (predicted end, job id, epoch) of running jobs, for `overdue`.
        self._ends: list[tuple[float, int, int]] = []
        self._levels: dict[int, float] = {}  # job id -> the level `started` was given

    def finished(self, run: JobRun) -> None:
        """Call when a job finishes (not when it is preempted): its runtime joins the history."""
        self.history.record(facts(run.job), run.job.duration)
        self._levels.pop(run.job.id, None)

    def prediction(self, run: JobRun) -> Prediction | None:
        """What the history predicts for the job now. (Not kept per job or per facts: keeping
        them per facts until the next finish saved nothing measurable in the replay or the
        honesty benchmark.)"""
        return self.history.predict(facts(run.job))

    def remaining(self, run: JobRun, ran: float = 0.0, q: float | None = None) -> float:
        """Predicted seconds left for a job that has `ran` seconds on its current attempt
        (plus whatever it saved before a preemption)."""
        q = self.q if q is None else q
        done = run.job.duration - run.remaining + ran  # the work a service would know of
        prediction = self.prediction(run)
        if prediction is None:
            return max(DEFAULT_RUNTIME - done, DEFAULT_RUNTIME * q)
        return prediction.remaining(done, q) if done > 0 else prediction.quantile(q)

    def started(self, run: JobRun, now: float, level: float | None = None) -> float:
        """A job starts: its predicted runtime for this attempt, remembered for `overdue`, read
        at quantile `level` (None: `q`), which `overdue` keeps reading it at: the service gives
        the engine a running job's release (`release_level`, services/forecasts/
        runtime_history.py)."""
        runtime = self.remaining(run, q=level)
        if level is not None:
            self._levels[run.job.id] = level
        heapq.heappush(self._ends, (now + runtime, run.job.id, run.epoch))
        return runtime

    def overdue(self, now: float, runs: dict[int, JobRun]) -> list[tuple[JobRun, float]]:
        """Running jobs whose predicted end has passed, each with a new predicted runtime for
        its current attempt (from its start), given how long it has run."""
        out: list[tuple[JobRun, float]] = []
        ends = self._ends
        while ends and ends[0][0] < now:
            _, job_id, epoch = heapq.heappop(ends)
            run = runs.get(job_id)
            if run is None or run.epoch != epoch or run.started_at is None:
                continue
            ran = now - run.started_at
            runtime = ran + self.remaining(run, ran, self._levels.get(job_id))
            heapq.heappush(ends, (run.started_at + runtime, job_id, epoch))
            out.append((run, runtime))
        return out
