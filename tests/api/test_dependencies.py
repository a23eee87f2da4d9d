"""Dependencies: submitted through the API, refused when they name jobs the user cannot see,
settled by the cycle's hold phase (released, cancelled, or explained), shown on the job."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuqueue.core.reason_text import describe_reason
from gpuqueue.core.states import FINAL, JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job, JobDependency, JobHold
from gpuqueue.services.jobs import dependencies
from gpuqueue.services.jobs.dependencies import Dependencies, submit_job_after


def _end(job: Job, state: str) -> None:
    finished = timezone.now() if state in FINAL else None
    Job.objects.filter(pk=job.pk).update(state=state, finished_at=finished)


def test_a_job_waits_with_a_reason_naming_each_job_and_its_state(
    api: Any, job_body: Any, submit: Any
) -> None:
    first, second = submit(name="prep"), submit(name="tokenize")
    body = {**job_body, "after_ok": [first.pk], "after_any": [second.pk]}
    response = api("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    job = response.json()
    assert job["hold"] == JobHold.DEPENDENCIES
    assert job["pending_reason_text"] == (
        f"Waiting for job #{first.pk} to succeed (pending now) and job #{second.pk} to end "
        "(pending now)."
    )
    shown = api("alice").get(f"/api/v1/jobs/{job['id']}/").json()
    assert [(d["job"], d["kind"]) for d in shown["depends_on"]] == [
        (first.pk, "after_ok"),
        (second.pk, "after_any"),
    ]
    upstream = api("bob").get(f"/api/v1/jobs/{first.pk}/").json()
    assert [(d["job"], d["state"]) for d in upstream["dependents"]] == [(job["id"], "PENDING")]


def test_another_teams_job_and_a_missing_one_are_refused_alike(
    api: Any, job_body: Any, submit: Any, world: Any
) -> None:
    theirs = submit(world.carol, team=world.team_b)
    missing = theirs.pk + 1000
    refused = {}
    for job_id in (theirs.pk, missing):
        response = api("alice").post(
            "/api/v1/jobs/", {**job_body, "after_ok": [job_id]}, format="json"
        )
        assert response.status_code == 400
        refused[job_id] = response.json()["error"]["fields"]["after_ok"]
    assert refused[theirs.pk] == [f"No job {theirs.pk} among the jobs you can see."]
    assert refused[missing] == [f"No job {missing} among the jobs you can see."]
    assert Job.objects.count() == 1


def test_a_job_cannot_depend_on_itself(api: Any, job_body: Any, submit: Any) -> None:
    """Its own id does not exist before it is written: the next id is refused as unseen."""
    last = submit()
    response = api("alice").post(
        "/api/v1/jobs/", {**job_body, "after_any": [last.pk + 1]}, format="json"
    )
    assert response.status_code == 400
    assert Job.objects.count() == 1 and JobDependency.objects.count() == 0


def test_a_dependency_already_unmet_is_refused_unless_kept(
    api: Any, job_body: Any, submit: Any
) -> None:
    failed = submit()
    _end(failed, JobState.FAILED)
    body = {**job_body, "after_ok": [failed.pk]}
    refused = api("alice").post("/api/v1/jobs/", body, format="json")
    assert refused.status_code == 400
    assert "could never start" in refused.json()["error"]["fields"]["after_ok"][0]
    kept = api("alice").post("/api/v1/jobs/", {**body, "keep_if_unmet": True}, format="json")
    assert kept.status_code == 201
    assert kept.json()["pending_reason_text"].startswith("Can never start")


def test_contradicting_kinds_on_one_job_are_refused(api: Any, job_body: Any, submit: Any) -> None:
    upstream = submit()
    body = {**job_body, "after_ok": [upstream.pk], "after_not_ok": [upstream.pk]}
    response = api("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert "after_not_ok" in response.json()["error"]["fields"]


def test_the_cycle_releases_on_success_and_cancels_when_unmet(
    world: Any, submit: Any, backend: Any
) -> None:
    from gpuqueue.cycle.cluster_sync import sync_cluster

    sync_cluster(backend)
    upstream = submit(name="prep", workers=4, gpus_per_worker=8)
    run_cycle(backend=backend)  # takes every H100: the dependents would fit only when it ends
    fields = {"name": "train", "image": "ghcr.io/acme/train:1"}
    ok = submit_job_after(
        world.alice, world.team_a, world.h100, {**fields, "after_ok": [upstream.pk]}
    ).job
    on_failure = submit_job_after(
        world.alice, world.team_a, world.h100, {**fields, "after_not_ok": [upstream.pk]}
    ).job
    assert run_cycle(backend=backend).admitted == []
    _end(upstream, JobState.SUCCEEDED)
    result = run_cycle(backend=backend)
    ok.refresh_from_db()
    on_failure.refresh_from_db()
    assert ok.pk in result.admitted and ok.state == JobState.ADMITTED
    assert on_failure.state == JobState.CANCELLED
    assert on_failure.message == (
        f"a dependency can never be met: job {upstream.pk} is SUCCEEDED (after_not_ok)"
    )
    assert on_failure.events.last().reason == on_failure.message


def test_after_not_ok_starts_when_any_listed_job_fails_and_is_cancelled_only_if_all_succeed(
    world: Any, submit: Any
) -> None:
    """Slurm's afternotok: a failure (or a cancellation) of any one listed job is enough."""
    a, b, c, d = (submit(name=n) for n in ("a", "b", "c", "d"))
    fields = {"name": "cleanup", "image": "ghcr.io/acme/train:1"}
    on_any = submit_job_after(
        world.alice, world.team_a, world.h100, {**fields, "after_not_ok": [a.pk, b.pk]}
    ).job
    on_none = submit_job_after(
        world.alice, world.team_a, world.h100, {**fields, "after_not_ok": [c.pk, d.pk]}
    ).job
    assert describe_reason(on_any.pending_reason) == (
        f"Waiting for any of job #{a.pk} (pending now) or job #{b.pk} (pending now) "
        "to fail or be cancelled."
    )
    _end(a, JobState.CANCELLED)  # b still pending: one is enough
    _end(c, JobState.SUCCEEDED)  # d still pending: it may yet fail
    dependencies.resolve(timezone.now())
    on_any.refresh_from_db()
    on_none.refresh_from_db()
    assert (on_any.state, on_any.hold) == (JobState.PENDING, "")
    assert (on_none.state, on_none.hold) == (JobState.PENDING, JobHold.DEPENDENCIES)
    _end(d, JobState.SUCCEEDED)
    dependencies.resolve(timezone.now())
    on_none.refresh_from_db()
    assert on_none.state == JobState.CANCELLED
    assert on_none.message == (
        f"a dependency can never be met: job {c.pk} is SUCCEEDED (after_not_ok), "
        f"job {d.pk} is SUCCEEDED (after_not_ok)"
    )


def test_after_not_ok_on_jobs_that_all_succeeded_is_refused_at_submission(
    api: Any, job_body: Any, submit: Any
) -> None:
    done, running = submit(), submit()
    _end(done, JobState.SUCCEEDED)
    body = {**job_body, "after_not_ok": [done.pk]}
    refused = api("alice").post("/api/v1/jobs/", body, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["fields"]["after_not_ok"] == [
        f"Every after_not_ok job ({done.pk}) already SUCCEEDED, so the job could never start."
    ]
    assert Job.objects.count() == 2
    body["after_not_ok"] = [done.pk, running.pk]  # the running one may still fail
    assert api("alice").post("/api/v1/jobs/", body, format="json").status_code == 201


# --- The property: released exactly when the condition holds, cancelled when it cannot -------

NOT_OK = {JobState.FAILED.value, JobState.CANCELLED.value}


def _by_the_issue(pairs: list[tuple[str, str]]) -> str:
    """The rules as docs/api.md words them, written apart from the code under test: after_ok all
    succeeded, after_any all ended, after_not_ok any failed (or was cancelled); impossible once
    an after_ok job failed, or every after_not_ok job succeeded."""
    by_kind = {kind: [s for k, s in pairs if k == kind] for kind in dependencies.KINDS}
    ok, any_, not_ok = by_kind["after_ok"], by_kind["after_any"], by_kind["after_not_ok"]
    if (
        all(s == JobState.SUCCEEDED for s in ok)
        and all(s in FINAL for s in any_)
        and (not not_ok or any(s in NOT_OK for s in not_ok))
    ):
        return "met"
    if any(s in NOT_OK for s in ok) or (not_ok and all(s == JobState.SUCCEEDED for s in not_ok)):
        return "impossible"
    return "waiting"


def _expected(
    states: dict[int, str], graph: list[tuple[list[tuple[int, str]], bool]], first_id: int
) -> list[str]:
    """The outcome of each dependent job (ids first_id, first_id + 1, … in graph order) by the
    rules, to a fixpoint: 'released', 'cancelled' or 'held'."""
    state = dict(states)
    outcome = ["held"] * len(graph)
    changed = True
    while changed:
        changed = False
        for i, (deps, keep) in enumerate(graph):
            if outcome[i] != "held":
                continue
            verdict = _by_the_issue([(kind, state[up]) for up, kind in deps])
            if verdict == "met":
                outcome[i] = "released"
            elif verdict == "impossible" and not keep:
                outcome[i] = "cancelled"
                state[first_id + i] = JobState.CANCELLED
            else:
                continue
            changed = True
    return outcome


ANY_STATE = st.sampled_from([s.value for s in JobState])
KIND = st.sampled_from(dependencies.KINDS)


@st.composite
def graphs(draw: Any) -> tuple[list[str], list[tuple[list[tuple[int, str]], bool]]]:
    """States of 1-4 upstream jobs, and 1-6 dependent jobs, each on a few of the upstream jobs
    or of the dependents before it (positions: upstream 0..u-1, then dependents)."""
    upstream = draw(st.lists(ANY_STATE, min_size=1, max_size=4))
    graph = []
    for i in range(draw(st.integers(1, 6))):
        targets = st.integers(0, len(upstream) + i - 1)
        deps = draw(st.lists(st.tuples(targets, KIND), min_size=1, max_size=3, unique=True))
        graph.append((deps, draw(st.booleans())))
    return upstream, graph


@pytest.mark.django_db
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=graphs())
def test_a_job_is_released_exactly_when_its_condition_holds_and_cancelled_when_it_cannot(
    world: Any, submit: Any, case: Any
) -> None:
    upstream_states, graph = case
    Job.objects.all().delete()
    upstream = [submit(name=f"up-{i}") for i in range(len(upstream_states))]
    ids = [job.pk for job in upstream]
    fields = {"name": "down", "image": "ghcr.io/acme/train:1"}
    for deps, keep in graph:
        lists: dict[str, list[int]] = {kind: [] for kind in dependencies.KINDS}
        for position, kind in deps:
            lists[kind].append(ids[position])
        job = submit_job_after(
            world.alice, world.team_a, world.h100, {**fields, **lists, "keep_if_unmet": keep}
        ).job
        ids.append(job.pk)
    for job, state in zip(upstream, upstream_states, strict=True):
        _end(job, state)
    first = ids[len(upstream)]
    graph_by_id = [
        ([(ids[position], kind) for position, kind in deps], keep) for deps, keep in graph
    ]
    states = {job.pk: s for job, s in zip(upstream, upstream_states, strict=True)}
    states.update({job_id: JobState.PENDING.value for job_id in ids[len(upstream) :]})
    want = _expected(states, graph_by_id, first)

    dependencies.resolve(timezone.now())
    rows = dict(Job.objects.filter(pk__in=ids[len(upstream) :]).values_list("id", "state"))
    holds = dict(Job.objects.filter(pk__in=ids[len(upstream) :]).values_list("id", "hold"))
    got = [
        "cancelled"
        if rows[job_id] == JobState.CANCELLED
        else "held"
        if holds[job_id] == JobHold.DEPENDENCIES
        else "released"
        for job_id in ids[len(upstream) :]
    ]
    assert got == want
    # A second pass changes nothing: the first reached the fixpoint.
    assert dependencies.resolve(timezone.now()) == dependencies.Resolved()


@given(
    waits=st.lists(
        st.tuples(st.integers(1, 9), KIND, ANY_STATE),
        min_size=1,
        max_size=6,
        unique_by=lambda w: w[:2],
    )
)
def test_submission_checks_judge_as_the_issue_says(waits: list[tuple[int, str, str]]) -> None:
    """The rules the cycle's hold phase judges by (and that refuse at submission and give the
    first reason) agree with the issue's."""
    want = _by_the_issue([(kind, state) for _, kind, state in waits])
    assert dependencies.conditions_met(waits) == (want == "met")
    assert bool(dependencies.unmeetable(waits)) == (want == "impossible")


def test_dependencies_are_read_once_per_kind() -> None:
    deps = Dependencies.of({"after_ok": [3, 3, 1], "after_any": [2]})
    assert deps.pairs() == [(3, "after_ok"), (1, "after_ok"), (2, "after_any")]
