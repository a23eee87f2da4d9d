"""The admission engine: pure, deterministic, standard library only.

`plan(snapshot, policy)` decides which pending jobs to admit (with their placement), which running
jobs to preempt, and why every other job is still pending. `forecast(snapshot, policy)` estimates
when each pending job will start by running `plan` forward in virtual time.
"""

from gpuqueue.native import check as _check_native_build

# Modules compiled with `make native` (optional) must match their sources: stale ones are refused
# before anything imports them.
_check_native_build()

from gpuqueue.scheduler.engine import plan  # noqa: E402 -- after the guard
from gpuqueue.scheduler.forecast import forecast  # noqa: E402

__all__ = ["forecast", "plan"]
