"""Migration 0034 moves what a pending job shows (its reason, its places in line) off the job
row to its `Standing`, and back when it is reversed: nothing a waiting job showed is lost."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = ("gpuqueue", "0033_pod_sets")
AFTER = ("gpuqueue", "0034_standing")
REASON = {"code": "no_capacity", "numbers": {"free": 2}, "job_ids": []}


def migrate(target: tuple[str, str]) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return MigrationExecutor(connection).loader.project_state([target]).apps


@pytest.mark.django_db(transaction=True)
def test_a_waiting_jobs_reason_and_places_move_to_its_standing_and_back(world: Any) -> None:
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes("gpuqueue")
    try:
        apps = migrate(BEFORE)
        Job = apps.get_model("gpuqueue", "Job")
        common = {
            "team_id": world.team_a.pk,
            "user_id": world.alice.pk,
            "flavor_id": world.h100.pk,
            "image": "x",
        }
        waiting = Job.objects.create(
            name="waiting", pending_reason=REASON, queue_position=2, cluster_position=5, **common
        )
        unranked = Job.objects.create(name="unranked", **common)
        running = Job.objects.create(
            name="running", state="RUNNING", pending_reason=REASON, queue_position=1, **common
        )

        apps = migrate(AFTER)
        Standing = apps.get_model("gpuqueue", "Standing")
        shown = {
            s.job_id: (s.reason, s.queue_position, s.cluster_position)
            for s in Standing.objects.all()
        }
        # Only a pending job that showed something has a standing.
        assert shown == {waiting.pk: (REASON, 2, 5)}
        assert unranked.pk not in shown and running.pk not in shown

        apps = migrate(BEFORE)
        Job = apps.get_model("gpuqueue", "Job")
        back = Job.objects.get(pk=waiting.pk)
        assert (back.pending_reason, back.queue_position, back.cluster_position) == (REASON, 2, 5)
    finally:
        MigrationExecutor(connection).migrate(latest)
