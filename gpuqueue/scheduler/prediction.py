"""Runtime prediction from history: how long a job is likely to run, learnt from finished jobs.

Users rarely give a runtime, yet the starvation guard, backfill and the forecast need one. A
job's runtime distribution is taken from the jobs that finished before it, at the most specific
level that has enough of them, every level keyed by the job's shape as well:

1. the same user, job name and shape (or, failing that, the same user, image and shape): a user
   re-running one experiment is the best guide to its next run;
2. the same team and shape (flavor, workers, GPUs per worker);
3. the same flavor and shape, whatever the team;
4. the flavor's jobs of the same size: one GPU, one worker of several GPUs, or several workers.

A shape is part of every key because runtime follows it: a sweep's one-GPU tasks and a 3 x 8
training gang of the same user, image and flavor run for minutes and for days, and a gang's
prediction learnt from the sweep would put its estimated start, and the starts it holds nodes
for, hours off. A shape with no history falls back to jobs of its size; a size with none has
no prediction (its job's max runtime, if any, stands in).

Each level keeps the last `window` runtimes of each key (recent behaviour beats old), and a
prediction is those runtimes sorted: any quantile can be read from it.

Runtimes drift, so the percentiles of a key's recent past are narrower than what comes next
(on Philly the 10th-90th percentile holds 63 % of the next runtimes, not 80 %:
benchmarks/prediction_accuracy.py). The history therefore also keeps where each finished
runtime fell in the prediction its facts had then (`Prediction.rank`), and `calibrated(q)`
gives the level at which a share q of them fell: the forecast reads its band's ends there
(band.py). This is quantile recalibration (Kuleshov et al., 2018), learnt online like the
rest.

The same class serves the replay (fed as jobs finish, so only the past counts) and the service
(fed from finished jobs in PostgreSQL, services/forecasts/runtime_history.py). Standard library
only.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# The levels, most specific first, as a prediction names them.
USER_NAME = "user_name"
USER_IMAGE = "user_image"
TEAM_SHAPE = "team_shape"
FLAVOR_SHAPE = "flavor_shape"
FLAVOR = "flavor"  # the flavor's jobs of the same size (`size`)
SOURCES = (USER_NAME, USER_IMAGE, TEAM_SHAPE, FLAVOR_SHAPE, FLAVOR)

# The quantiles the forecast's band is read at, and its most likely time.
LOW, MEDIAN, HIGH = 0.1, 0.5, 0.9
# Ranks kept for `RuntimeHistory.calibrated`, and how many it needs before it trusts them.
RANKS, MIN_RANKS = 1000, 50
# Declared runtimes are guesses too: the band widens a declared runtime by where the runtimes
# of jobs that declared one fell against it (`RuntimeHistory.declared_spread`), once this many
# have finished; before, by DECLARED_PRIOR (the actual runtime over the declared one, at the
# band's two ends): users round up, and jobs fail early.
MIN_DECLARED = 20
DECLARED_PRIOR = (0.5, 1.2)


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the history is keyed by. Empty `name` or `image`: that level is skipped."""

    user: str
    team: str
    flavor: str
    workers: int
    gpus_per_worker: int
    name: str = ""
    image: str = ""


@dataclass(frozen=True, slots=True)
class Prediction:
    """A runtime distribution: `runtimes` sorted (seconds), from `source` (one of SOURCES)."""

    runtimes: tuple[float, ...]
    source: str

    @property
    def samples(self) -> int:
        return len(self.runtimes)

    def quantile(self, q: float) -> float:
        """The q-quantile (0..1), interpolated between neighbouring runtimes."""
        return _quantile(self.runtimes, q)

    def rank(self, runtime: float) -> float:
        """Where `runtime` falls in the distribution, 0..1: the inverse of `quantile` (0 below
        the shortest runtime, 1 above the longest)."""
        return _rank(self.runtimes, runtime)

    def remaining(self, elapsed: float, q: float) -> float:
        """The q-quantile of the time left for a job that has run `elapsed` seconds: from the
        runtimes longer than that. A job that outlived every one of them is taken to follow a
        Pareto tail (P(T > t | T > e) = e / t, the "Lindy" rule for job lengths): it has
        elapsed x q / (1 - q) left, as long again as it ran at the median."""
        longer = self.runtimes[bisect_right(self.runtimes, elapsed) :]
        if longer:
            return max(_quantile(longer, q) - elapsed, 0.0)
        q = min(max(q, 0.0), 0.99)
        return max(elapsed, 1.0) * q / (1.0 - q)

    def as_data(self) -> dict[str, float | int | str]:
        """The numbers the job page, API and CLI show."""
        return {
            "p10": round(self.quantile(LOW)),
            "p50": round(self.quantile(MEDIAN)),
            "p90": round(self.quantile(HIGH)),
            "source": self.source,
            "samples": self.samples,
        }


def size(workers: int, gpus_per_worker: int) -> str:
    """A job's size, the last level of prediction: one GPU, one worker, or several workers."""
    if workers <= 1:
        return "one_gpu" if gpus_per_worker <= 1 else "one_worker"
    return "workers"


def release_level(gpus_per_worker: int, node_gpus: int) -> float:
    """The quantile at which to read a running job's remaining runtime for when its GPUs come
    back, as reservations read it (starvation.py): a node frees when the last of its jobs ends,
    and a job holding g of a node's G GPUs shares it with about G / g jobs like it, so the
    node's median end is each one's MEDIAN ** (g / G) quantile (independent runtimes). The
    median for a job that fills its node; the 92nd percentile for a one-GPU job on an 8-GPU
    node. Read at the median, a node of one-GPU jobs seems to free hours before it does, and a
    reservation picks it over a node of one whole-node job: on 10 % Philly samples at 80 %
    load the guarantee violations were 24 % higher (docs/benchmarks.md)."""
    if node_gpus <= 0 or gpus_per_worker >= node_gpus:
        return MEDIAN
    return float(MEDIAN ** (max(gpus_per_worker, 1) / node_gpus))


def _quantile(values: Sequence[float], q: float) -> float:
    n = len(values)
    if n == 1:
        return values[0]
    pos = min(max(q, 0.0), 1.0) * (n - 1)
    i = int(pos)
    if i >= n - 1:
        return values[-1]
    return values[i] + (values[i + 1] - values[i]) * (pos - i)


def _rank(values: Sequence[float], x: float) -> float:
    n = len(values)
    if n == 1:
        return 0.5
    i = bisect_right(values, x)
    if i == 0:
        return 0.0
    if i >= n:
        return 1.0
    below, above = values[i - 1], values[i]
    fraction = (x - below) / (above - below) if above > below else 0.5
    return (i - 1 + fraction) / (n - 1)


class _Window:
    """The last `size` runtimes of one key, in arrival order and sorted."""

    __slots__ = ("order", "sorted")

    def __init__(self, size: int) -> None:
        self.order: deque[float] = deque(maxlen=size)
        self.sorted: list[float] = []

    def add(self, runtime: float) -> None:
        order = self.order
        if len(order) == order.maxlen:
            old = order[0]
            del self.sorted[bisect_right(self.sorted, old) - 1]
        order.append(runtime)
        insort(self.sorted, runtime)


class RuntimeHistory:
    """Finished jobs' runtimes by level and key; `predict` reads the most specific level with
    at least `min_samples` runtimes (the flavor needs one).

    Online by construction: a caller records a job when it finishes, so a prediction made at
    any moment sees only jobs finished before it.
    """

    def __init__(self, window: int = 64, min_samples: int = 3, ranks: int = RANKS) -> None:
        if window < 1 or min_samples < 1 or ranks < 1:
            raise ValueError("window, min_samples and ranks must be at least 1")
        self.window = window
        self.min_samples = min_samples
        self._by: dict[tuple[object, ...], _Window] = {}
        # Where the last `ranks` finished runtimes fell in their facts' predictions.
        self._ranks = _Window(ranks)
        # Of the last `ranks` finished jobs that declared a runtime, runtime / declared.
        self._declared = _Window(ranks)
        self.recorded = 0

    @staticmethod
    def _keys(facts: JobFacts) -> list[tuple[str, tuple[object, ...]]]:
        keys: list[tuple[str, tuple[object, ...]]] = []
        flavor, workers, per = facts.flavor, facts.workers, facts.gpus_per_worker
        if facts.name:
            keys.append((USER_NAME, (USER_NAME, facts.user, facts.name, flavor, workers, per)))
        if facts.image:
            keys.append((USER_IMAGE, (USER_IMAGE, facts.user, facts.image, flavor, workers, per)))
        keys.append((TEAM_SHAPE, (TEAM_SHAPE, facts.team, flavor, workers, per)))
        keys.append((FLAVOR_SHAPE, (FLAVOR_SHAPE, flavor, workers, per)))
        keys.append((FLAVOR, (FLAVOR, flavor, size(workers, per))))
        return keys

    def record(self, facts: JobFacts, runtime: float, declared: float | None = None) -> None:
        """A job of `facts` finished after running `runtime` seconds (<= 0 is ignored), having
        declared `declared` seconds (None: no runtime declared)."""
        if not runtime > 0:
            return
        if declared is not None and declared > 0:
            self._declared.add(runtime / declared)
        keys = self._keys(facts)
        found = self._answering(keys)  # what `predict` read for these facts until now
        if found is not None:
            self._ranks.add(_rank(found[1].sorted, runtime))
        self.recorded += 1
        by = self._by
        for _, key in keys:
            window = by.get(key)
            if window is None:
                window = by[key] = _Window(self.window)
            window.add(runtime)

    def record_all(self, finished: Iterable[tuple[JobFacts, float, float | None]]) -> None:
        """(facts, runtime, declared runtime or None) of finished jobs, oldest first."""
        for facts, runtime, declared in finished:
            self.record(facts, runtime, declared)

    def predict(self, facts: JobFacts) -> Prediction | None:
        """The distribution at the most specific level with enough runtimes; None when no
        finished job of the flavor has the job's size (`size`)."""
        found = self._answering(self._keys(facts))
        return None if found is None else Prediction(tuple(found[1].sorted), found[0])

    def _answering(self, keys: list[tuple[str, tuple[object, ...]]]) -> tuple[str, _Window] | None:
        """The most specific level's window with enough runtimes, and its level."""
        by = self._by
        for source, key in keys:
            window = by.get(key)
            if window is None:
                continue
            if len(window.sorted) >= self.min_samples or source == FLAVOR:
                return source, window
        return None

    def calibrated(self, q: float) -> float:
        """The level to read a prediction at for its q-quantile to hold a share q of the
        runtimes: the q-quantile of where the finished ones fell in their predictions. `q`
        itself until MIN_RANKS runtimes have been ranked."""
        ranks = self._ranks.sorted
        if len(ranks) < MIN_RANKS:
            return q
        return _quantile(ranks, q)

    def declared_spread(self, levels: tuple[float, float] = (LOW, HIGH)) -> tuple[float, float]:
        """Actual over declared runtime at the band's two levels, from the finished jobs that
        declared one (DECLARED_PRIOR with fewer than MIN_DECLARED of them)."""
        ratios = self._declared.sorted
        if len(ratios) < MIN_DECLARED:
            return DECLARED_PRIOR
        return _quantile(ratios, levels[0]), _quantile(ratios, levels[1])

    def band_levels(self) -> tuple[float, float]:
        """The levels to read the band's 10th and 90th percentiles at (band.py)."""
        return self.calibrated(LOW), self.calibrated(HIGH)
