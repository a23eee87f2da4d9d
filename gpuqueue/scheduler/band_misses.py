"""The band fitted to how far the forecast's own bands missed (conformal, learnt online).

band.py's band widens the most likely wait by the spread of the runtimes in the way. How well
that holds depends on things it does not model (jobs still to arrive, runtimes that move
together, how long the way is), and on Philly it held 64-88 % of the starts depending on the
weeks. So the band shown is that band stretched, on the log scale of the wait, by the amount
that would have held LEVEL of the starts over the last WINDOW of forecasts: conformalized
quantile regression (Romano, Patterson and Candès, 2019), with a product-limit (Kaplan-Meier)
quantile because many forecasts of the window are of jobs still waiting. The amount may be
negative: a band that held more than LEVEL narrows.

A forecast's miss score: for a band (E, L) of waits from the forecast and the actual wait A,
max(log(E / A), log(A / L)): negative inside, the log-factor it missed by outside. A job still
waiting after a time c scores at least the least score of any A >= c (right-censored). Waits
under FLOOR count as FLOOR: starts fall on the admission cycle's grid.

Who learns from what: a sample of the forecasts (`chosen`: a share of the pending jobs each
hour, the same jobs in the replay and the service) is kept with its band before the stretch;
the service keeps them in PostgreSQL (services/forecasts/band_samples.py), the replay in memory
(sim/honesty.py). Only outcomes known by the time of the forecast count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuqueue.scheduler.band import Estimate, at_least_a_cycle

LEVEL = 0.8  # the share of starts the band should hold: a 10th to 90th percentile band
WINDOW = 7 * 86400.0  # the forecasts learnt from: the last week's
MIN_STARTS = 50  # fewer starts in the window: the band is shown as band.py gives it
FLOOR = 60.0  # seconds: one admission cycle
SAMPLE_EVERY = 3600.0  # a job is sampled at most once per this many seconds
SAMPLE_SHARE = 8  # one pending job in this many is sampled (a fixed share: see `chosen`)


@dataclass(frozen=True, slots=True)
class BandSample:
    """One forecast: made at `at` (seconds), its band's ends as waits from then (`late`
    math.inf when open), and when the job left the queue: `left` None while it still waits
    at the time of learning, `started` False when it left without starting (cancelled)."""

    at: float
    early: float
    late: float
    left: float | None = None
    started: bool = True


def chosen(job_id: int, at: float) -> bool:
    """Whether the forecast of `job_id` at `at` is kept to learn from: one job in
    SAMPLE_SHARE, another set each hour (a multiplicative hash: the same in the replay and
    the service). A fixed share keeps busy hours weighed as they are: a cap per hour would
    make the few jobs of quiet hours count as much as the many of busy ones."""
    hour = int(at // SAMPLE_EVERY)
    return ((job_id * 2654435761 + hour * 40503) >> 7) % SAMPLE_SHARE == 0


def kept(estimates: Mapping[int, Estimate], now: float) -> dict[int, tuple[float, float]]:
    """The forecasts at `now` to learn from: the `chosen` jobs with a band, as its ends' waits
    (late math.inf when open). Kept by the service and the replay alike."""
    return {
        job_id: (e.early - now, math.inf if e.late is None else e.late - now)
        for job_id, e in estimates.items()
        if e.early is not None and chosen(job_id, now)
    }


def _score(early: float, late: float, wait: float) -> float:
    return max(math.log(early / wait), math.log(wait / late) if math.isfinite(late) else -math.inf)


def miss_score(early: float, late: float, wait: float) -> float:
    """How far (log-factor) a start after `wait` seconds fell outside the band (early, late):
    negative inside it."""
    return _score(max(early, FLOOR), max(late, FLOOR), max(wait, FLOOR))


def least_score(early: float, late: float, waited: float) -> float:
    """The lowest score a job still waiting after `waited` seconds can end with: the wait
    nearest the band's middle (geometric) that is still possible."""
    early, late, waited = max(early, FLOOR), max(late, FLOOR), max(waited, FLOOR)
    if not math.isfinite(late):
        return -math.inf  # an open band holds any late start
    return _score(early, late, max(waited, math.sqrt(early * late)))


def product_limit_quantile(scores: Iterable[tuple[float, bool]], q: float) -> float:
    """The q-quantile of the Kaplan-Meier estimate from (value, exact) pairs, an inexact value
    being a lower bound (right-censored); math.inf when the estimate never reaches q (too
    many bounds above the exact values)."""
    ordered = sorted(scores, key=lambda s: (s[0], not s[1]))  # exact first at ties
    survival = 1.0
    at_risk = len(ordered)
    for value, exact in ordered:
        if exact:
            survival *= 1.0 - 1.0 / at_risk
            if 1.0 - survival >= q - 1e-12:
                return value
        at_risk -= 1
    return math.inf


def widening(
    samples: Iterable[BandSample],
    now: float,
    level: float = LEVEL,
    window: float = WINDOW,
    min_starts: int = MIN_STARTS,
) -> float | None:
    """The log-factor by which the bands of the forecasts made in the `window` before `now`
    should have been stretched to hold `level` of the starts; None with fewer than
    `min_starts` of their jobs started by `now`. Outcomes after `now` are not known yet."""
    scores: list[tuple[float, bool]] = []
    starts = 0
    for s in samples:
        if not now - window <= s.at < now:
            continue
        if s.left is not None and s.left <= now:
            if s.started:
                scores.append((miss_score(s.early, s.late, s.left - s.at), True))
                starts += 1
            else:  # left without starting: it would have waited at least this long
                scores.append((least_score(s.early, s.late, s.left - s.at), False))
        else:
            scores.append((least_score(s.early, s.late, now - s.at), False))
    if starts < min_starts:
        return None
    return product_limit_quantile(scores, level)


def widen(estimate: Estimate, now: float, by: float | None) -> Estimate:
    """`estimate`'s band stretched by the log-factor `by` around its waits (None: as it is);
    the most likely start stays inside, and a band that shrinks still reaches a cycle either
    side of it (band.at_least_a_cycle). An infinite stretch opens the band: from now, no
    late end."""
    if by is None or estimate.likely is None or estimate.early is None:
        return estimate
    likely = estimate.likely
    if math.isinf(by):
        return Estimate(likely, now, None)
    factor = math.exp(by)
    early = now + min((estimate.early - now) / factor, likely - now)
    late = None
    if estimate.late is not None:
        late = now + max((estimate.late - now) * factor, likely - now)
    return at_least_a_cycle(Estimate(likely, early, late), now)
