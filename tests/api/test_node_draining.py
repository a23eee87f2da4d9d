"""The nodes API shows the GPUs that gpuqueue's terminating pods still hold on each node: by job
for the jobs the reader may read, and as counts with no job named for the other teams' jobs."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.models import Node

GPU = "nvidia.com/gpu"


@pytest.fixture
def draining(world: Any, nodes: Any, submit: Any) -> dict[str, int]:
    """Team a's job and two of team b's hold GPUs of h100-0 while their pods terminate."""
    a_job = submit(name="a-train", gpus_per_worker=4)
    b_job = submit(user=world.carol, team=world.team_b, name="b-train", gpus_per_worker=2)
    b_other = submit(user=world.carol, team=world.team_b, name="b-eval", gpus_per_worker=2)
    Node.objects.filter(name="h100-0").update(
        draining={
            str(a_job.pk): {GPU: 4},
            str(b_job.pk): {GPU: 2},
            str(b_other.pk): {GPU: 2},
        }
    )
    return {"a": a_job.pk, "b": b_job.pk, "b_other": b_other.pk}


def entry(job: int | None, name: str | None, gpus: int) -> dict[str, Any]:
    return {"job": job, "job_name": name, "resource": GPU, "gpus": gpus}


def expected(persona: str, ids: dict[str, int]) -> list[dict[str, Any]]:
    a = entry(ids["a"], "a-train", 4)
    b = [entry(ids["b"], "b-train", 2), entry(ids["b_other"], "b-eval", 2)]
    if persona in ("alice", "bob"):  # team a
        return [a, entry(None, None, 4)]
    if persona == "carol":  # team b
        return [*b, entry(None, None, 4)]
    return [a, *b]  # root, a site admin


@pytest.mark.parametrize("persona", ["alice", "bob", "carol", "root"])
def test_a_reader_sees_their_own_teams_draining_jobs_and_only_counts_of_the_others(
    api: Any, draining: dict[str, int], persona: str
) -> None:
    client = api(persona)
    detail = client.get("/api/v1/nodes/h100-0/")
    assert detail.status_code == 200
    assert detail.json()["draining"] == expected(persona, draining)
    listed = {n["name"]: n["draining"] for n in client.get("/api/v1/nodes/").json()["results"]}
    assert listed["h100-0"] == expected(persona, draining)
    assert listed["h100-1"] == []


def test_a_node_list_reads_the_draining_jobs_once_for_the_page(
    api: Any, draining: dict[str, int], django_assert_max_num_queries: Any
) -> None:
    for name in ("h100-1", "h100-2", "h100-3"):
        Node.objects.filter(name=name).update(draining={str(draining["a"]): {GPU: 8}})
    client = api("alice")
    client.get("/api/v1/nodes/")  # the token cached: the nodes, then their jobs
    with django_assert_max_num_queries(2) as queries:
        body = client.get("/api/v1/nodes/").json()
    assert len(body["results"]) == 6, queries
    assert sum(len(n["draining"]) for n in body["results"]) == 5


def test_a_site_admin_draining_a_node_sees_its_draining_jobs_named(
    api: Any, draining: dict[str, int]
) -> None:
    body = api("root").post("/api/v1/nodes/h100-0/drain/").json()
    assert body["drained"] is True
    assert body["draining"] == expected("root", draining)
