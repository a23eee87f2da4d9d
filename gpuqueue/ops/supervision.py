"""When the launcher restarts a process that died, and when it gives up.

A process that dies is restarted after a backoff that doubles with each death in a row (1 s,
2 s, 4 s, … at most `max_delay`) and starts again from 1 s once the process has stayed up for
`settle` seconds. One that died `give_up_after` times within `window` seconds is not restarted:
something is wrong that a restart will not mend (a port taken, a broken configuration), and
the launcher stops and says which process and how it ended. Pure: the launcher passes the
clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class RestartPolicy:
    first_delay: float = 1.0
    max_delay: float = 30.0
    settle: float = 60.0
    window: float = 120.0
    give_up_after: int = 5
    _deaths: dict[str, deque[float]] = field(default_factory=dict)
    _streak: dict[str, int] = field(default_factory=dict)
    _started: dict[str, float] = field(default_factory=dict)

    def started(self, name: str, now: float) -> None:
        self._started[name] = now

    def died(self, name: str, now: float) -> float | None:
        """The seconds to wait before restarting `name`, or None: give up."""
        deaths = self._deaths.setdefault(name, deque())
        deaths.append(now)
        while deaths and deaths[0] < now - self.window:
            deaths.popleft()
        if len(deaths) >= self.give_up_after:
            return None
        if now - self._started.get(name, now) >= self.settle:
            self._streak[name] = 0
        streak = self._streak.get(name, 0)
        self._streak[name] = streak + 1
        return min(self.first_delay * 2**streak, self.max_delay)
