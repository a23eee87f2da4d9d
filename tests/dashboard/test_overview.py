"""The overview at `/`: per flavor GPUs in use, free and asked for; the viewer's jobs by
state; the typical wait now; free GPUs split by why no waiting job takes them."""

from __future__ import annotations

from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.accounting.idle_causes import idle_split
from gpuqueue.services.jobs.array_spec import parse
from gpuqueue.services.jobs.arrays import hold_over_limit, submit_array
from gpuqueue.services.jobs.dependencies import Dependencies
from tests.standings import show

pytestmark = pytest.mark.django_db


def test_the_overview_counts_gpus_per_flavor_and_my_jobs(clients: Any, jobs: Any) -> None:
    html = clients["alice"].get("/").content.decode()
    assert "<h1>Overview</h1>" in html
    row = html.split('data-flavor="h100"')[1].split("</tr>")[0]
    # h100: 3 ready nodes of 8 (one of them cordoned: no new work), one NotReady; 8 + 2 in
    # use, so 6 free on the open nodes; 32 asked by a 4 × 8 job.
    cells = [c.split("<")[0] for c in row.split('<td class="num">')[1:]]
    assert cells[:3] == ["10", "6", "24"]
    assert "32" in row and "(1 job)" in row
    mine = html.split('id="my-jobs"')[1].split("</ul>")[0]
    assert (
        "PENDING</span> <strong>1</strong>" in mine and "RUNNING</span> <strong>1</strong>" in mine
    )
    # carol's jobs are not alice's.
    assert "CANCELLED" not in mine
    assert "CANCELLED</span> <strong>1</strong>" in clients["carol"].get("/").content.decode()


def test_the_typical_wait_is_the_median_of_the_last_hours_starts(clients: Any, jobs: Any) -> None:
    now = timezone.now()
    waits = {jobs.a_running.pk: 60, jobs.b_running.pk: 600}
    for pk, seconds in waits.items():
        Job.objects.filter(pk=pk).update(
            submitted_at=now - timedelta(seconds=seconds + 30),
            admitted_at=now - timedelta(seconds=30),
        )
    html = clients["alice"].get("/").content.decode()
    wait = html.split('id="typical-wait"')[1].split("</p>")[0]
    assert "5 min" in wait and "2 jobs" in wait


def test_free_gpus_are_split_by_cause(clients: Any, world: Any, nodes: Any, submit: Any) -> None:
    # 16 free h100 GPUs on two nodes. A 1-GPU array at %1 with one task offered and three held
    # by its own limit; a 2-GPU job waiting for a dependency; a 4-GPU job over its team's limit.
    fields = {"name": "sweep", "image": "ghcr.io/acme/train:1"}
    submit_array(world.alice, world.team_a, world.h100, fields, parse("0-3%1"), Dependencies())
    hold_over_limit()
    blocked = submit(world.alice, name="after", workers=1, gpus_per_worker=2)
    show(blocked.pk, reason={"code": "dependencies", "numbers": {}})
    limited = submit(world.carol, team=world.team_b, name="big", workers=1, gpus_per_worker=4)
    show(limited.pk, reason={"code": "over_limit", "numbers": {}})
    split = {s.flavor: s for s in idle_split()}["h100"]
    assert split.free == 16
    assert split.by_cause == {"throttle": 3, "dependencies": 2, "limits": 4, "scheduler": 0}
    assert split.truly_idle == 7
    html = clients["bob"].get("/").content.decode()
    line = unescape(html.split('class="idle-split" data-flavor="h100"')[1].split("</p>")[0])
    assert "3 held back by their users' own array limits" in line
    assert "2 waiting for the jobs they depend on" in line
    assert "4 kept out by their team's limit" in line and "7 truly idle" in line


def test_capacity_reasons_keep_nothing_idle(world: Any, nodes: Any, submit: Any) -> None:
    job = submit(world.alice, name="huge", workers=1, gpus_per_worker=8)
    show(job.pk, reason={"code": "no_capacity", "numbers": {}})
    split = {s.flavor: s for s in idle_split()}["h100"]
    assert sum(split.by_cause.values()) == 0 and split.truly_idle == split.free


def test_old_links_to_the_job_list_still_land_on_it(clients: Any, jobs: Any) -> None:
    response = clients["alice"].get("/?state=pending&ordering=name")
    assert (
        response.status_code == 302 and response["Location"] == "/jobs/?state=pending&ordering=name"
    )
    assert clients["alice"].get(response["Location"]).status_code == 200


def test_the_overview_refreshes_as_a_partial(clients: Any, jobs: Any) -> None:
    part = clients["alice"].get("/", HTTP_HX_REQUEST="true")
    assert part.status_code == 200 and part.content.decode().startswith('<div id="overview"')
    assert clients["anonymous"].get("/").status_code == 302


def test_a_finished_job_counts_among_my_jobs_for_a_day(clients: Any, jobs: Any) -> None:
    Job.objects.filter(pk=jobs.b_done.pk).update(finished_at=timezone.now() - timedelta(days=2))
    html = clients["carol"].get("/").content.decode()
    assert JobState.CANCELLED not in html.split('id="mine-title"')[1].split("</section>")[0]
