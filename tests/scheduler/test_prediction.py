"""Runtime prediction from history (gpuqueue/scheduler/prediction.py) and the estimated start's
band built on it (gpuqueue/scheduler/band.py)."""

from __future__ import annotations

import importlib
import math
import random
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuqueue.scheduler.band import CYCLE, forecast_band, with_runtimes
from gpuqueue.scheduler.band_misses import widen
from gpuqueue.scheduler.model import Plan, Policy, Snapshot
from gpuqueue.scheduler.never import never_admitted
from gpuqueue.scheduler.prediction import (
    DECLARED_PRIOR,
    FLAVOR,
    FLAVOR_SHAPE,
    MIN_DECLARED,
    MIN_RANKS,
    TEAM_SHAPE,
    USER_IMAGE,
    USER_NAME,
    JobFacts,
    Prediction,
    RuntimeHistory,
    release_level,
)
from tests.scheduler.builders import NOW, node, pending, running, team
from tests.scheduler.test_properties import snapshots

# The module, not the function the package exports under the same name.
forecast_module = importlib.import_module("gpuqueue.scheduler.forecast")

RUNTIMES = st.lists(st.floats(1.0, 1e6, allow_nan=False), min_size=1, max_size=80)
QUANTILE = st.floats(0.0, 1.0)


def facts(user: str = "alice", name: str = "", image: str = "", gpus: int = 1) -> JobFacts:
    return JobFacts(user, "team-a", "h100", 1, gpus, name=name, image=image)


@given(RUNTIMES, QUANTILE, QUANTILE)
def test_a_quantile_lies_within_the_runtimes_seen_and_grows_with_q(
    runtimes: list[float], q1: float, q2: float
) -> None:
    history = RuntimeHistory(window=100)
    for r in runtimes:
        history.record(facts(), r)
    prediction = history.predict(facts())
    assert prediction is not None
    low, high = sorted((q1, q2))
    assert min(runtimes) <= prediction.quantile(low) <= prediction.quantile(high) <= max(runtimes)


@given(RUNTIMES, st.floats(0.0, 2e6), QUANTILE, QUANTILE)
@example([524289.8089311688], 1.6332699424237944, 0.0, 0.0)  # one ulp short: rounding
def test_the_time_left_of_a_running_job_is_never_negative_and_grows_with_q(
    runtimes: list[float], elapsed: float, q1: float, q2: float
) -> None:
    prediction = Prediction(tuple(sorted(runtimes)), FLAVOR)
    low, high = sorted((q1, q2))
    assert 0.0 <= prediction.remaining(elapsed, low) <= prediction.remaining(elapsed, high)
    # A job still running was longer than every runtime at or below `elapsed`.
    left = prediction.remaining(elapsed, 0.5)
    shorter = [r for r in runtimes if r > elapsed]
    if shorter:  # (up to rounding: `left` is a runtime minus `elapsed`, in floats)
        assert elapsed + left >= min(shorter) or math.isclose(
            elapsed + left, min(shorter), rel_tol=1e-12
        )


@given(st.lists(st.floats(1.0, 1e5, allow_nan=False), min_size=1, max_size=200))
def test_each_key_keeps_only_its_most_recent_runtimes(runtimes: list[float]) -> None:
    history = RuntimeHistory(window=16, min_samples=1)
    for r in runtimes:
        history.record(facts(name="train"), r)
    prediction = history.predict(facts(name="train"))
    assert prediction is not None
    assert prediction.runtimes == tuple(sorted(runtimes[-16:]))


def test_the_most_specific_level_with_enough_runtimes_is_used() -> None:
    history = RuntimeHistory(min_samples=3)
    history.record(facts(name="other", gpus=8), 9000.0)  # the flavor's only other job
    for r in (100.0, 200.0):
        history.record(facts(name="train", image="img"), r)
    # Two runs of "train" are not enough; its team and shape have only those two as well.
    assert history.predict(facts(name="train", image="img")).source == FLAVOR  # type: ignore[union-attr]
    history.record(facts(name="train", image="img"), 300.0)
    got = history.predict(facts(name="train", image="img"))
    assert got is not None and got.source == USER_NAME and got.quantile(0.5) == 200.0
    # Another name from the same image and user: the image's history.
    got = history.predict(facts(name="new", image="img"))
    assert got is not None and got.source == USER_IMAGE
    # Another user of the same team and shape: the team's.
    got = history.predict(facts(user="bob", name="train"))
    assert got is not None and got.source == TEAM_SHAPE
    assert RuntimeHistory().predict(facts()) is None  # nothing finished yet


def test_a_gangs_prediction_is_not_learnt_from_one_gpu_sweep_tasks() -> None:
    """A user's 200 one-GPU sweep tasks of 5 min, of the same name, image and flavor as their
    3 x 8 gang, say nothing of how long the gang runs: the gang is predicted from gangs."""

    def gang(user: str = "alice", team: str = "team-a", workers: int = 3) -> JobFacts:
        return JobFacts(user, team, "h100", workers, 8, name="train", image="img")

    history = RuntimeHistory()
    for _ in range(200):
        history.record(JobFacts("alice", "team-a", "h100", 1, 1, "train", "img"), 300.0)
    assert history.predict(gang()) is None  # no job of its size has finished
    history.record(gang(user="bob", team="team-b", workers=4), 86400.0)
    got = history.predict(gang())
    assert got is not None and (got.source, got.runtimes) == (FLAVOR, (86400.0,))
    for hours in (20, 30, 40):
        history.record(gang(user="bob", team="team-b"), hours * 3600.0)
    got = history.predict(gang())
    assert got is not None and got.source == FLAVOR_SHAPE and got.quantile(0.5) == 30 * 3600.0
    for hours in (10, 12, 14):
        history.record(gang(), hours * 3600.0)
    got = history.predict(gang())
    assert got is not None and got.source == USER_NAME and got.quantile(0.5) == 12 * 3600.0
    # The sweep's own tasks are still predicted from the sweep.
    sweep = history.predict(JobFacts("alice", "team-a", "h100", 1, 1, "train", "img"))
    assert sweep is not None and sweep.source == USER_NAME and sweep.quantile(0.5) == 300.0


def test_the_band_spans_the_start_at_the_10th_and_90th_percentile_runtimes() -> None:
    # n1 is held by job 10, just started; jobs like it ran 100, 200 or 300 s.
    snapshot = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(running(10, "a", {"n1": 1}, gpus=8, preemptible=False, started=NOW),),
        pending=(pending(1, "b", gpus=8),),
    )
    known = {10: Prediction((100.0, 200.0, 300.0), TEAM_SHAPE)}
    band = forecast_band(snapshot, known)[1]
    assert band.likely == NOW + 200
    assert band.early == NOW + 120  # the 10th percentile is 120 s, 0.6 of the median
    assert band.late == NOW + 280
    assert band.why_none is None
    # Read at calibrated levels of 0 and 1 (RuntimeHistory.calibrated), the band's ends are the
    # shortest and longest runtimes known.
    band = forecast_band(snapshot, known, levels=(0.0, 1.0))[1]
    assert (band.early, band.likely, band.late) == (NOW + 100, NOW + 200, NOW + 300)


# Whole seconds: between runtimes one float apart a quantile rounds to one end, and its rank
# with it (1.0 and 1.0000000000000002 put the median at 1.0, rank 0).
@given(st.lists(st.integers(1, 10**6), min_size=2, max_size=80, unique=True), QUANTILE)
def test_a_runtimes_rank_is_the_level_its_quantile_is_read_at(seconds: list[int], q: float) -> None:
    runtimes = [float(s) for s in seconds]
    prediction = Prediction(tuple(sorted(runtimes)), FLAVOR)
    assert prediction.rank(prediction.quantile(q)) == pytest.approx(q, abs=1e-9)
    assert prediction.rank(min(runtimes) / 2) == 0.0
    assert prediction.rank(max(runtimes) * 2) == 1.0


def test_runtimes_that_keep_outgrowing_their_history_move_the_levels_up() -> None:
    """Every run of a job takes longer than all runs before it: each finished runtime ranks
    above its prediction, so the calibrated 10th and 90th percentiles are the longest runtime
    seen. Before MIN_RANKS runtimes are ranked, the levels are the nominal ones."""
    history = RuntimeHistory()
    for i in range(MIN_RANKS):
        history.record(facts(name="train"), 100.0 + i)
    assert (history.calibrated(0.1), history.calibrated(0.9)) == (0.1, 0.9)  # 49 ranked
    history.record(facts(name="train"), 200.0)
    assert (history.calibrated(0.1), history.calibrated(0.9)) == (1.0, 1.0)


def test_runtimes_drawn_alike_keep_the_nominal_levels() -> None:
    """A job whose runtimes come from one distribution: its history's percentiles mean what
    they say, and the calibrated levels stay near 10 % and 90 %."""
    draw = random.Random(7)
    history = RuntimeHistory()
    for _ in range(3000):
        history.record(facts(name="train"), draw.lognormvariate(8.0, 1.0))
    assert history.calibrated(0.1) == pytest.approx(0.1, abs=0.04)
    assert history.calibrated(0.5) == pytest.approx(0.5, abs=0.04)
    assert history.calibrated(0.9) == pytest.approx(0.9, abs=0.04)


def test_a_job_with_no_estimate_says_why() -> None:
    snapshot = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(running(10, "a", {"n1": 1}, gpus=8, preemptible=False, started=NOW),),
        pending=(pending(1, "b", gpus=8), pending(2, "b", gpus=16)),
    )
    bands = forecast_band(snapshot, {})
    assert bands[1].likely is None and bands[1].why_none == "unknown_runtime"
    assert bands[2].likely is None and bands[2].why_none == "never_fits"


def test_workers_that_no_set_of_nodes_holds_never_fit_though_the_gpus_add_up() -> None:
    # 2 x 6 GPUs on 8 + 4: 12 GPUs of 12, but a worker runs on one node and n2 holds none.
    snapshot = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8), node("n2", h100=4)),
        teams=(team("a", guarantee=12),),
        running=(),
        pending=(pending(1, "a", workers=2, gpus=6), pending(2, "a", gpus=6)),
    )
    assert never_admitted(snapshot) == {1}
    bands = forecast_band(snapshot, {})
    assert bands[1].likely is None and bands[1].why_none == "never_fits"
    assert bands[2].likely == NOW


def test_a_gang_beyond_its_teams_limit_never_fits_and_the_forecast_does_not_wait_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # n1 is busy for ten hours; n2 is free. Job 1 starts now; job 2 asks 16 GPUs of a team
    # limited to 8: no state of the cluster admits it, so there is nothing to play forward.
    snapshot = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8), node("n2", h100=8)),
        teams=(team("a", guarantee=8, limit=8), team("b", guarantee=8)),
        running=(running(10, "b", {"n1": 1}, gpus=8, started=NOW, expected_runtime=36000),),
        pending=(pending(1, "a", gpus=8), pending(2, "a", workers=2, gpus=8)),
    )
    plans: list[float] = []
    engine_plan = forecast_module.plan

    def counted(state: Snapshot, policy: Policy, *, explain: bool = True) -> Plan:
        plans.append(state.now)
        return engine_plan(state, policy, explain=explain)

    monkeypatch.setattr(forecast_module, "plan", counted)
    bands = forecast_band(snapshot, {})
    assert bands[1].likely == NOW
    assert bands[2].likely is None and bands[2].why_none == "never_fits"
    assert plans == [NOW]


@settings(max_examples=60, deadline=None)
@given(snapshots(), st.floats(10.0, 1e5))
def test_every_band_holds_its_most_likely_start_and_declared_runtimes_stay(
    snapshot: Snapshot, median: float
) -> None:
    known = {
        job.id: Prediction((median / 2, median, median * 3), TEAM_SHAPE)
        for job in (*snapshot.running, *snapshot.pending)
    }
    filled = with_runtimes(snapshot, known, 0.5)
    for before, after in zip(snapshot.pending, filled.pending, strict=True):
        assert after.expected_runtime == (
            before.expected_runtime if before.expected_runtime is not None else median
        )
    for est in forecast_band(snapshot, known).values():
        if est.likely is None:
            assert est.why_none is not None
            continue
        assert est.early is not None and est.early <= est.likely
        assert est.late is None or est.likely <= est.late
        assert math.isfinite(est.likely)


def test_when_every_job_in_the_way_declares_its_runtime_the_band_is_not_one_instant() -> None:
    """n1 is held by a job that declared 1,000 s; the waiting job's band spreads by how far
    declared runtimes missed (the prior until MIN_DECLARED finished), then by what they
    showed: jobs ran 0.8-1.0 x what they declared."""
    snapshot = Snapshot(
        now=NOW,
        nodes=(node("n1", h100=8),),
        teams=(team("a", guarantee=8), team("b")),
        running=(running(10, "a", {"n1": 1}, gpus=8, started=NOW, expected_runtime=1000.0),),
        pending=(pending(1, "b", gpus=8, expected_runtime=600.0),),
    )
    history = RuntimeHistory()
    band = forecast_band(snapshot, {}, declared=history.declared_spread())[1]
    low, high = DECLARED_PRIOR
    assert (band.early, band.likely, band.late) == (NOW + 1000 * low, NOW + 1000, NOW + 1200)
    assert high == 1.2
    for i in range(MIN_DECLARED):
        history.record(facts(name="x"), 800.0 + 200.0 * i / (MIN_DECLARED - 1), declared=1000.0)
    low, high = history.declared_spread()
    assert 0.8 < low < high < 1.0
    band = forecast_band(snapshot, {}, declared=(low, high))[1]
    # Every job in the way ran no longer than it declared: the band ends a cycle after.
    assert band.early == pytest.approx(NOW + 1000 * low)
    assert band.late == NOW + 1000 + CYCLE


@settings(max_examples=60, deadline=None)
@given(snapshots(), st.floats(-3.0, 3.0), st.booleans())
def test_a_band_is_never_one_instant(snapshot: Snapshot, by: float, declared: bool) -> None:
    """Whatever the snapshot, with every runtime declared or none, and however much the band
    is stretched or shrunk by its misses (band_misses.widen): it reaches at least a cycle after
    the most likely start, and a cycle before it unless that is now."""
    if declared:
        snapshot = replace(
            snapshot,
            running=tuple(replace(j, expected_runtime=600.0) for j in snapshot.running),
            pending=tuple(replace(j, expected_runtime=900.0) for j in snapshot.pending),
        )
        known: dict[int, Prediction] = {}
    else:
        known = {
            j.id: Prediction((600.0,), TEAM_SHAPE) for j in (*snapshot.running, *snapshot.pending)
        }
    for band in forecast_band(snapshot, known, declared=(1.0, 1.0)).values():
        for est in (band, widen(band, snapshot.now, by)):
            if est.likely is None or est.early is None:
                continue
            assert est.late is None or est.late >= est.likely + CYCLE
            assert est.early <= max(snapshot.now, est.likely - CYCLE)
            assert est.late is None or est.late > est.early


def test_inside_a_team_a_job_of_unknown_runtime_takes_its_turn_as_if_it_ran_an_hour() -> None:
    """Shortest predicted first (ordering.py, rule 5): leaving the runtime out must not jump the
    queue, so an unknown runtime counts as model.UNKNOWN_RUNTIME (an hour)."""
    from gpuqueue.scheduler.model import UNKNOWN_RUNTIME

    assert UNKNOWN_RUNTIME == 3600
    unknown = pending(1, "a", submitted=NOW)
    short = pending(2, "a", submitted=NOW, expected_runtime=600)
    long = pending(3, "a", submitted=NOW, max_runtime=7200)
    assert short.rank < unknown.rank < long.rank
    # Aging: a long job submitted long enough before goes before a short one.
    older_long = pending(4, "a", submitted=NOW - 7000, max_runtime=7200)
    assert older_long.rank < short.rank


def test_a_running_job_is_released_at_the_level_where_a_node_of_its_like_frees() -> None:
    """A node of G GPUs holding G / g jobs of g GPUs frees when the last ends: with independent
    runtimes, its median end is each job's 0.5 ** (g / G) quantile."""
    assert release_level(8, 8) == release_level(16, 8) == release_level(1, 0) == 0.5
    assert release_level(4, 8) == pytest.approx(math.sqrt(0.5))
    assert release_level(1, 8) ** 8 == pytest.approx(0.5)
    assert release_level(1, 8) > release_level(2, 8) > release_level(4, 8)
