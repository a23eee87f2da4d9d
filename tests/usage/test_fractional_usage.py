"""A fractional job counts its thousandths of a GPU: the ledger's GPU-seconds (whether the
minute's sweep or the door's release writes them), the usage figures, and what the snapshot
gives the engine."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Sum
from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.cycle.snapshot import load_snapshot
from gpuqueue.models import Job, Node, UsageRecord
from gpuqueue.services.accounting.usage_ledger import record_open_attempts
from gpuqueue.services.cluster.inventory import usage_now
from gpuqueue.services.jobs.admissions import Admitted, admit_all
from gpuqueue.services.jobs.cancel import cancel_job
from gpuqueue.services.jobs.transitions import transition
from tests.conftest import H100_MODEL

pytestmark = pytest.mark.django_db


def _gpu_seconds(job: Job) -> float:
    return float(UsageRecord.objects.filter(job_id=job.pk).aggregate(s=Sum("gpu_seconds"))["s"])


def _run(job: Job, devices: list[list[Any]], since: Any) -> Job:
    placement = {"h100-shared-0": job.workers}
    assert admit_all([Admitted(job.pk, placement, False, devices)], since, "cycle")
    job.refresh_from_db()
    assert transition(job, JobState.RUNNING, reason="running", actor="test")
    return job


def test_a_fraction_counts_its_thousandths_of_each_gpu_second(
    shared_flavor: Any, submit: Any, world: Any
) -> None:
    """Two workers of a quarter GPU for an hour and a half: 0.5 × 5,400 GPU-seconds, while it
    runs (the sweep) and once it ends (the release); a whole GPU beside it counts 1 ×."""
    since = timezone.now() - timedelta(minutes=90)
    quarter = _run(
        submit(flavor=shared_flavor, workers=2, gpu_milli=250),
        [["h100-shared-0", 0], ["h100-shared-0", 0]],
        since,
    )
    whole = _run(submit(flavor=shared_flavor, workers=1), [], since)
    assert Job.objects.get(pk=quarter.pk).gpu_devices == [["h100-shared-0", 0]] * 2
    now = timezone.now()
    record_open_attempts(now)
    held = (now - since).total_seconds()
    assert _gpu_seconds(quarter) == pytest.approx(0.5 * held, rel=1e-6)
    assert _gpu_seconds(whole) == pytest.approx(held, rel=1e-6)
    cancel_job(world.alice, quarter)
    ended = (Job.objects.get(pk=quarter.pk).finished_at - since).total_seconds()
    assert _gpu_seconds(quarter) == pytest.approx(0.5 * ended, rel=1e-3)
    assert set(UsageRecord.objects.filter(job_id=quarter.pk).values_list("gpus", flat=True)) == {2}


def test_usage_figures_count_a_fraction_of_a_gpu(
    shared_flavor: Any, submit: Any, world: Any
) -> None:
    _run(
        submit(flavor=shared_flavor, workers=3, gpu_milli=250),
        [["h100-shared-0", 0]] * 3,
        timezone.now(),
    )
    submit(flavor=shared_flavor, workers=1, gpu_milli=500)
    usage = {u.flavor: u for u in usage_now()}["h100-shared"]
    assert (usage.capacity, usage.allocated, usage.pending_gpus) == (2, 0.75, 0.5)
    assert usage.teams[0].allocated == 0.75


def test_the_snapshot_gives_the_engine_fractions_models_devices_and_shared_flavors(
    shared_flavor: Any, submit: Any, world: Any
) -> None:
    """The shared node offers its 8 slices as 2 GPUs; 3 slices used by others' pods take 1."""
    Node.objects.filter(name="h100-shared-0").update(
        gpu_model=H100_MODEL, used_externally={"nvidia.com/gpu.shared": 3}
    )
    running = _run(
        submit(flavor=shared_flavor, workers=1, gpu_milli=250),
        [["h100-shared-0", 1]],
        timezone.now(),
    )
    pending = submit(flavor=shared_flavor, gpu_milli=500, gpu_models=[H100_MODEL])
    snapshot = load_snapshot(timezone.now())
    assert snapshot.shared_flavors == frozenset({"h100-shared"})
    node = next(n for n in snapshot.nodes if n.name == "h100-shared-0")
    assert (node.model, dict(node.capacity), dict(node.used_externally)) == (
        H100_MODEL,
        {"h100-shared": 2},
        {"h100-shared": 1},
    )
    [job] = [j for j in snapshot.pending if j.id == pending.pk]
    assert (job.gpu_milli, job.gpu_models, job.gpus_per_worker) == (500, (H100_MODEL,), 1)
    [held] = [j for j in snapshot.running if j.id == running.pk]
    assert (held.gpu_milli, held.devices) == (250, (("h100-shared-0", 1),))
