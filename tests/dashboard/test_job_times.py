"""The job list's Waited, Ran and GPU-h columns."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from dashboard.job_times import elapsed_seconds, gpu_hours, waited_seconds

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=3)


def job(**times: Any) -> SimpleNamespace:
    base = {"submitted_at": T0, "admitted_at": None, "started_at": None, "finished_at": None}
    return SimpleNamespace(workers=2, gpus_per_worker=4, **{**base, **times})


@pytest.mark.parametrize(
    ("what", "the_job", "waited", "ran", "hours"),
    [
        ("pending so far", job(), 3 * 3600, None, None),
        (
            "running",
            job(admitted_at=T0 + timedelta(minutes=30), started_at=T0 + timedelta(hours=1)),
            1800,
            2 * 3600,
            16.0,
        ),
        (
            "finished",
            job(
                admitted_at=T0 + timedelta(hours=1),
                started_at=T0 + timedelta(hours=1),
                finished_at=T0 + timedelta(hours=1, minutes=30),
            ),
            3600,
            1800,
            4.0,
        ),
        ("cancelled while pending", job(finished_at=T0 + timedelta(hours=2)), 7200, None, None),
    ],
)
def test_wait_run_and_gpu_hours(
    what: str, the_job: Any, waited: float, ran: float | None, hours: float | None
) -> None:
    assert waited_seconds(the_job, NOW) == waited
    assert elapsed_seconds(the_job, NOW) == ran
    assert gpu_hours(the_job, NOW) == hours


def test_the_job_list_shows_them_without_breaking_names(clients: Any, jobs: Any) -> None:
    page = clients["alice"].get("/jobs/").content.decode()
    assert ">Waited</a></th>" in page and ">Ran</a></th>" in page and ">GPU-h</a></th>" in page
    row = page[page.index(f'data-job-id="{jobs.a_running.pk}"') :]
    row = row[: row.index("</tr>")]
    assert '<td class="nowrap">team-a</td>' in row
    assert re.search(r'<td class="nowrap num">\d+\.\d</td>', row)  # GPU-hours once it runs


def test_the_job_page_quotes_the_command_and_counts_gpus_in_words(
    clients: Any, world: Any, nodes: Any, submit: Any
) -> None:
    job = submit(world.alice, name="one-gpu", command=["python", "-c", "print('two words')"])
    page = clients["alice"].get(f"/jobs/{job.pk}/").content.decode()
    assert "python -c &#x27;print(&#x27;&quot;&#x27;&quot;&#x27;two words" in page
    assert "= 1 GPU</dd>" in page
