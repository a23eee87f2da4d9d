"""Ledger rows for the report's tests: alice and bob (team-a) and carol (team-b) on h100,
alice also on l4, over two days of March 2026; one of alice's attempts was preempted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.api.conftest import api, cli, job_body, nodes, tokens  # noqa: F401 - personas, API, CLI
from tests.dashboard.conftest import browser, clients  # noqa: F401 - signed-in clients

DAY1 = datetime(2026, 3, 1, tzinfo=UTC)
DAY2 = datetime(2026, 3, 2, tzinfo=UTC)


@pytest.fixture
def ledger(world: Any) -> Any:
    from gpuqueue.models import UsageRecord

    def row(
        job: int,
        user: Any,
        team: Any,
        flavor: Any,
        hour: datetime,
        hours: float,
        gpus: int = 8,
        outcome: str = "succeeded",
        attempt: int = 1,
    ) -> UsageRecord:
        return UsageRecord(
            job_id=job,
            attempt=attempt,
            hour=hour,
            team=team,
            user=user,
            flavor=flavor,
            gpus=gpus,
            gpu_seconds=hours * 3600,
            outcome=outcome,
        )

    w = world
    UsageRecord.objects.bulk_create(
        [
            row(1, w.alice, w.team_a, w.h100, DAY1.replace(hour=10), 8.0),  # 8 GPUs, 1 h
            row(1, w.alice, w.team_a, w.h100, DAY1.replace(hour=11), 4.0),
            row(2, w.alice, w.team_a, w.h100, DAY2.replace(hour=3), 2.0, outcome="preempted"),
            row(3, w.alice, w.team_a, w.l4, DAY2.replace(hour=3), 1.0, gpus=1),
            row(4, w.bob, w.team_a, w.h100, DAY2.replace(hour=5), 16.0, gpus=16),
            row(5, w.carol, w.team_b, w.h100, DAY1.replace(hour=23), 3.0),
        ]
    )
    return w
