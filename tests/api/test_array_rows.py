"""The API's job list shows an array as one row by default, with the whole array in
`array_summary`; `?expand=tasks` lists every task as before."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from gpuqueue.core.states import JobState
from gpuqueue.models import Job
from gpuqueue.services.jobs.arrays import hold_over_limit


def _sweep(api: Any, job_body: dict[str, Any], spec: str = "0-9%2") -> dict[str, Any]:
    body = {**job_body, "name": "sweep", "array": spec, "expected_runtime_seconds": "10m"}
    response = api("alice").post("/api/v1/arrays/", body, format="json")
    assert response.status_code == 201, response.content
    hold_over_limit()  # as the next cycle's hold phase would
    return dict(response.json())


def test_an_array_is_one_row_of_the_list_with_its_summary(api: Any, job_body: Any) -> None:
    array = _sweep(api, job_body)
    single = api("alice").post("/api/v1/jobs/", job_body, format="json").json()
    rows = api("alice").get("/api/v1/jobs/").json()["results"]
    assert [r["id"] for r in rows if r["array"] == array["id"]] != []
    assert len([r for r in rows if r["array"] == array["id"]]) == 1
    row = next(r for r in rows if r["array"] == array["id"])
    assert row["array_index"] == 0  # the first task stands for the array; still a job's shape
    summary = row["array_summary"]
    assert summary["label"] == f"{array['id']}_[0-9%2]"
    assert (summary["size"], summary["max_concurrent"], summary["state"]) == (10, 2, "PENDING")
    assert summary["counts"]["PENDING"] == 10
    assert summary["next_held"] == (
        "Task 2 of 10: the array runs 2 at a time; it starts as task 0 finishes."
    )
    assert next(r for r in rows if r["id"] == single["id"])["array_summary"] is None


def test_expand_tasks_lists_every_task(api: Any, job_body: Any) -> None:
    array = _sweep(api, job_body)
    rows = api("alice").get("/api/v1/jobs/", {"expand": "tasks"}).json()["results"]
    tasks = [r for r in rows if r["array"] == array["id"]]
    assert sorted(r["array_index"] for r in tasks) == list(range(10))
    assert {r["array_summary"] is None for r in tasks} == {True}
    bad = api("alice").get("/api/v1/jobs/", {"expand": "everything"})
    assert bad.status_code == 400 and "expand" in bad.json()["error"]["fields"]


def test_the_summary_times_the_next_start_and_the_finish(api: Any, job_body: Any) -> None:
    array = _sweep(api, job_body, "0-3%1")
    now = timezone.now()
    Job.objects.filter(array_id=array["id"], array_index=0).update(
        state=JobState.RUNNING, admitted_at=now, started_at=now
    )
    hold_over_limit()
    rows = api("alice").get("/api/v1/jobs/", {"state": "pending"}).json()["results"]
    summary = next(r for r in rows if r["array"] == array["id"])["array_summary"]
    assert summary["state"] == "RUNNING" and summary["label"] == f"{array['id']}_[1-3%1]"
    # One at a time, 10 minutes each: task 1 starts in 10 min, the last ends in 40.
    starts = summary["next_start"], summary["estimated_finish"]
    assert all(starts), summary
    from datetime import datetime

    begin, end = (datetime.fromisoformat(s.replace("Z", "+00:00")) for s in starts)
    assert 590 <= (begin - now).total_seconds() <= 610
    assert 2390 <= (end - now).total_seconds() <= 2410


def test_the_row_is_the_first_task_the_filter_matches(api: Any, job_body: Any) -> None:
    array = _sweep(api, job_body)
    Job.objects.filter(array_id=array["id"], array_index__lt=3).update(
        state=JobState.CANCELLED, finished_at=timezone.now()
    )
    rows = api("alice").get("/api/v1/jobs/", {"state": "pending"}).json()["results"]
    assert [r["array_index"] for r in rows if r["array"] == array["id"]] == [3]
    assert api("carol").get("/api/v1/jobs/").json()["results"] == []


def test_pages_of_one_row_walk_each_array_once_in_any_order(api: Any, job_body: Any) -> None:
    arrays = [_sweep(api, {**job_body, "name": f"s{i}"}, "0-4") for i in range(2)]
    singles = [api("alice").post("/api/v1/jobs/", job_body, format="json").json() for _ in range(2)]
    for ordering in ("-id", "name", "-waited", "state"):
        seen, url, query = [], "/api/v1/jobs/", {"page_size": 1, "ordering": ordering}
        while url:
            page = api("alice").get(url, query).json()
            seen += [(r["array"], r["id"]) for r in page["results"]]
            url, query = page["next"], None
        assert sorted(a for a, _ in seen if a is not None) == sorted(a["id"] for a in arrays)
        assert {i for a, i in seen if a is None} == {s["id"] for s in singles}
        assert len(seen) == 4, (ordering, seen)
