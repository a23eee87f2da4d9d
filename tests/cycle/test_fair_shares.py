"""The cycle keeps the fair shares it planned with, for the pages and /metrics to read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.cycle.snapshot import load_snapshot
from gpuqueue.models import FairShare, Quota
from gpuqueue.scheduler.fairshare import fair_shares
from gpuqueue.services.quotas.fair_shares import stored_fair_shares


def test_the_cycle_stores_every_fair_share_it_planned_with(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)
    submit(workers=4, gpus_per_worker=8)
    now = timezone.now()
    planned = fair_shares(load_snapshot(now))
    run_cycle(now=now, backend=backend)
    assert stored_fair_shares() == planned
    assert ("team-a", "h100") in planned


def test_a_share_that_did_not_change_is_not_rewritten_and_a_removed_quota_loses_its_row(
    world: Any, submit: Any, backend: Any
) -> None:
    sync_cluster(backend)
    t0 = timezone.now()
    run_cycle(now=t0, backend=backend)
    run_cycle(now=t0 + timedelta(seconds=30), backend=backend)
    assert set(FairShare.objects.values_list("planned_at", flat=True)) == {t0}
    Quota.objects.filter(team=world.team_b).delete()
    run_cycle(now=t0 + timedelta(seconds=60), backend=backend)
    assert not any(team == "team-b" for team, _ in stored_fair_shares())
    assert any(team == "team-a" for team, _ in stored_fair_shares())
