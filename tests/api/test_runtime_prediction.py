"""Runtime predictions from finished jobs in the service: the estimated start with its band for
jobs that declared no runtime, and what the API shows of both."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import refresh_forecasts, run_cycle
from gpuqueue.models import Job

SIM_DURATION = "gpuqueue.dev/sim-duration-seconds"
RUNTIMES = (1800, 2400, 3000, 3600, 4200)  # median 3000 s


def finished_like(submit: Any, now: Any, runtimes: tuple[int, ...], **fields: Any) -> None:
    """Jobs of alice's that ran `runtimes` seconds and succeeded an hour or more ago."""
    for runtime in runtimes:
        job = submit(**fields)
        started = now - timedelta(seconds=runtime + 3600)
        Job.objects.filter(pk=job.pk).update(
            state=JobState.SUCCEEDED,
            started_at=started,
            finished_at=started + timedelta(seconds=runtime),
        )


def fill_the_h100s(submit: Any, backend: Any, now: Any) -> None:
    """Four 8-GPU jobs of the same name, with no runtime given, hold every H100."""
    for _ in range(4):
        submit(gpus_per_worker=8, annotations={SIM_DURATION: "100000"})
    run_cycle(backend=backend, now=now)
    assert Job.objects.filter(state__in=("ADMITTED", "RUNNING")).count() == 4


def waiting_behind_the_h100s(
    submit: Any, backend: Any, history: bool = True, **fields: Any
) -> tuple[Job, Any]:
    """The H100s full (`fill_the_h100s`), after alice's finished jobs like it (`history`), an
    8-GPU job of hers submitted and one cycle run: the job, and the time of that cycle."""
    sync_cluster(backend)
    now = timezone.now()
    if history:
        finished_like(submit, now, RUNTIMES, gpus_per_worker=8)
    fill_the_h100s(submit, backend, now)
    waiting = submit(gpus_per_worker=8, **fields)
    run_cycle(backend=backend, now=now)
    return waiting, now


def test_a_job_with_no_runtime_given_gets_an_estimate_and_a_band_from_jobs_like_it(
    world: Any, submit: Any, backend: Any, api: Any
) -> None:
    waiting, now = waiting_behind_the_h100s(submit, backend)
    assert refresh_forecasts(now=now) == 1
    waiting.refresh_from_db()
    # The running jobs just started and their kind ran 3000 s at the median.
    eta = (waiting.estimated_start - now).total_seconds()
    assert 3000 - 120 <= eta <= 3000 + 300, eta
    body = api("alice").get(f"/api/v1/jobs/{waiting.pk}/").json()
    assert body["runtime_prediction"] == {
        "p10": 2040,
        "p50": 3000,
        "p90": 3960,
        "source": "user_name",
        "samples": 5,
    }
    band = body["start_band"]
    assert band["why_none"] is None and band["why_none_text"] is None
    early = (timezone.datetime.fromisoformat(band["early"]) - now).total_seconds()
    late = (timezone.datetime.fromisoformat(band["late"]) - now).total_seconds()
    assert early < eta < late


def test_a_declared_expected_runtime_is_shown_as_declared(
    world: Any, submit: Any, backend: Any, api: Any
) -> None:
    waiting, now = waiting_behind_the_h100s(submit, backend, expected_runtime_seconds=900)
    refresh_forecasts(now=now)
    body = api("alice").get(f"/api/v1/jobs/{waiting.pk}/").json()
    assert body["runtime_prediction"]["source"] == "declared"
    assert body["runtime_prediction"]["p50"] == 900


def test_without_any_finished_job_the_page_says_why_there_is_no_estimate(
    world: Any, submit: Any, backend: Any, api: Any
) -> None:
    waiting, now = waiting_behind_the_h100s(submit, backend, history=False)
    assert refresh_forecasts(now=now) == 0
    body = api("alice").get(f"/api/v1/jobs/{waiting.pk}/").json()
    assert body["estimated_start"] is None
    assert body["runtime_prediction"] is None
    assert body["start_band"]["why_none"] == "unknown_runtime"
    assert "no runtime" in body["start_band"]["why_none_text"]


def test_gpuqueue_status_shows_the_band_and_where_the_prediction_came_from(
    world: Any, submit: Any, backend: Any, cli: Any, capsys: Any
) -> None:
    waiting, now = waiting_behind_the_h100s(submit, backend)
    refresh_forecasts(now=now)
    capsys.readouterr()
    assert cli("status", str(waiting.pk)) == 0
    out = capsys.readouterr().out
    assert (
        "runtime: about 50 min (10-90 %: 34 min to 1 h 06 min), from 5 finished jobs of the "
        "same user and name" in out
    )
    assert "start band: between " in out and ", 10-90 %" in out


def test_predictions_kept_from_cycle_to_cycle_equal_predictions_made_afresh(
    world: Any, submit: Any, backend: Any, monkeypatch: Any
) -> None:
    """The admission cycle keeps each job's prediction between cycles (it runs at tens of
    thousands of pending jobs); what it gives must be what predicting every job again gives,
    also once the history has moved and once a job has changed."""
    from gpuqueue.cycle.snapshot import load_snapshot
    from gpuqueue.scheduler.band import with_runtimes
    from gpuqueue.scheduler.prediction import MEDIAN, RuntimeHistory
    from gpuqueue.services.forecasts import runtime_history as rh

    sync_cluster(backend)
    now = timezone.now()
    finished_like(submit, now, RUNTIMES, gpus_per_worker=8)
    fill_the_h100s(submit, backend, now)
    waiting = [submit(gpus_per_worker=8) for _ in range(3)]
    other = submit(gpus_per_worker=8, name="eval")  # nothing like it by name: team and shape
    read_history = rh.runtime_history

    def read_again() -> RuntimeHistory:
        rh._history.keep_only({})  # what HISTORY_SECONDS does
        return read_history()

    history = [read_again()]
    monkeypatch.setattr(rh, "runtime_history", lambda: history[0])

    def both() -> dict[int, float | None]:
        snapshot = load_snapshot(now)
        kept = rh.with_predicted_runtimes(snapshot)
        assert kept == with_runtimes(snapshot, rh.predictions_for(snapshot), MEDIAN)
        return {job.id: job.expected_runtime for job in kept.pending}

    first = both()
    assert [first[job.pk] for job in waiting] == [3000, 3000, 3000]
    assert first[other.pk] is not None
    assert both() == first  # the same history: every job as kept
    # More of the same name finished, and the history is read again: the median moves.
    finished_like(submit, now, (9000,) * 6, gpus_per_worker=8)
    history[0] = read_again()
    moved = both()
    assert [moved[job.pk] for job in waiting] == [9000, 9000, 9000]
    # A job that declares its runtime keeps its own.
    Job.objects.filter(pk=waiting[0].pk).update(expected_runtime_seconds=600)
    assert both()[waiting[0].pk] == 600


def test_the_engine_reads_a_running_job_as_released_when_a_node_of_its_like_frees() -> None:
    """The cycle gives the engine a running job's end at `release_level`: a one-GPU job on an
    8-GPU node at the 92nd percentile of what is left of its prediction (a node of eight such
    jobs frees when the last ends), a job filling its node at the median, a declared runtime
    as declared."""
    from gpuqueue.scheduler.model import Snapshot
    from gpuqueue.scheduler.prediction import Prediction, release_level
    from gpuqueue.services.forecasts.runtime_history import with_releases
    from tests.scheduler.builders import HOUR, NOW, nodes, running, team

    snapshot = Snapshot(
        now=NOW,
        nodes=nodes(2, h100=8),
        teams=(team("a", guarantee=16),),
        running=(
            running(1, "a", {"n1": 1}, started=NOW),
            running(2, "a", {"n2": 1}, gpus=8, started=NOW),
            running(3, "a", {"n1": 1}, started=NOW, expected_runtime=HOUR),
        ),
        pending=(),
    )
    prediction = Prediction(tuple(float(s) for s in range(100, 1100, 100)), "flavor_shape")
    released = with_releases(snapshot, {1: prediction, 2: prediction, 3: prediction})
    expected = [j.expected_runtime for j in released]
    assert expected == [prediction.quantile(release_level(1, 8)), prediction.quantile(0.5), HOUR]
    assert expected[0] > 900.0 > prediction.quantile(0.5)


def test_only_a_prediction_from_finished_jobs_lets_a_job_backfill_not_a_declared_runtime(
    world: Any, submit: Any, backend: Any
) -> None:
    """Backfill lends a starving gang's reserved GPUs to a job that should end before the
    reservation starts. A declared expected runtime is not enforced: a user declaring 60 s on
    a long job must not get them, while a job predicted from its finished peers may."""
    from gpuqueue.cycle.snapshot import load_snapshot, policy_from_settings
    from gpuqueue.scheduler.starvation import backfill_runtime
    from gpuqueue.services.forecasts import runtime_history as rh

    sync_cluster(backend)
    now = timezone.now()
    finished_like(submit, now, RUNTIMES, gpus_per_worker=8)
    fill_the_h100s(submit, backend, now)
    predicted = submit(gpus_per_worker=8)
    declared = submit(gpus_per_worker=8, expected_runtime_seconds=60)
    enforced = submit(gpus_per_worker=8, max_runtime_seconds=600)
    jobs = {job.id: job for job in rh.with_predicted_runtimes(load_snapshot(now)).pending}
    policy = policy_from_settings()
    assert jobs[declared.pk].expected_runtime == 60  # still what orders it and forecasts it
    assert backfill_runtime(jobs[declared.pk], policy) is None
    assert backfill_runtime(jobs[predicted.pk], policy) == policy.backfill_prediction_factor * 3000
    assert backfill_runtime(jobs[enforced.pk], policy) == 600
