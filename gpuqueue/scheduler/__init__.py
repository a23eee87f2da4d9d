"""The admission engine: pure, deterministic, standard library only.

`plan(snapshot, policy)` decides which pending jobs to admit (with their placement), which running
jobs to preempt, and why every other job is still pending. `forecast(snapshot, policy)` estimates
when each pending job will start by running `plan` forward in virtual time.
"""

from gpuqueue.scheduler.engine import plan
from gpuqueue.scheduler.forecast import forecast

__all__ = ["forecast", "plan"]
