"""The cluster page draws a shared GPU partly filled: each fractional worker in its team's colour
as high as its thousandths, the GPU's thousandths in use said in words, and whose job it is only
to those who may see it."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard.geometry import Cell, Share, node_cells, share_fill, shared_gpus
from gpuqueue.models import Job

pytestmark = pytest.mark.django_db


def test_workers_without_a_stored_gpu_go_on_the_first_gpu_with_room() -> None:
    a, b = Share("team-a", 1, 500), Share("team-b", 2, 750)
    assert shared_gpus([(1, a)], [b, a], gpus=2) == [[b], [a, a]]


def test_a_shared_gpu_is_filled_from_the_bottom_by_each_share() -> None:
    cell = Cell(None, shares=(Share("team-a", 1, 250), Share("team-b", None, 500)))
    assert cell.milli == 750
    assert share_fill(cell, {"team-a": "#111", "team-b": "#222"}) == (
        "linear-gradient(to top, #111 0% 25%, #222 25% 75%, #e8ebf0 75% 100%)"
    )
    cells = node_cells(2, [], external=0, shared=[list(cell.shares)])
    assert [c.milli for c in cells] == [750, 0]


def test_the_cluster_page_shows_a_shared_gpu_partly_filled_with_its_thousandths(
    world: Any, clients: Any, shared_flavor: Any, submit: Any
) -> None:
    quarter = submit(flavor=shared_flavor, workers=2, gpu_milli=250)
    half = submit(world.carol, team=world.team_b, flavor=shared_flavor, gpu_milli=500)
    Job.objects.filter(pk=quarter.pk).update(
        state="RUNNING",
        placement={"h100-shared-0": 2},
        gpu_devices=[["h100-shared-0", 0], ["h100-shared-0", 0]],
    )
    Job.objects.filter(pk=half.pk).update(
        state="RUNNING", placement={"h100-shared-0": 1}, gpu_devices=[["h100-shared-0", 1]]
    )
    body = clients["alice"].get("/cluster/").content.decode()
    assert "<strong>1</strong> of 2 GPUs allocated (50 %)" in body
    assert 'data-milli="500"' in body and body.count('class="gpu gpu-shared"') == 2
    assert (
        f"shared GPU, 500/1000 in use (team-a · job #{quarter.pk}: 250/1000; team-a · job " in body
    )
    # carol's team's job: its team shows, not the job.
    assert "shared GPU, 500/1000 in use (team-b: 500/1000)" in body
    assert f"job #{half.pk}" not in body
    assert "linear-gradient(to top, " in body and "0% 25%" in body
