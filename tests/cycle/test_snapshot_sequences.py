"""The cycle's incremental snapshot equals a fresh load, whatever happened in between.

The admission cycle keeps active jobs between cycles (cycle/job_feed.py: the change feed),
nodes, flavors, quotas and teams while their tables are unchanged (cycle/table_versions.py),
and the runtime predicted for each job (services/forecasts/runtime_history.py,
`with_predicted_runtimes`), and re-reads only rows that changed. A Hypothesis state machine
applies random sequences of what a live service sees (submissions of every shape,
dependencies and capped arrays, cancellations, admissions, starts, ends, failed starts,
deleted jobs, idle GPUs, whole cycles, forecasts, hold changes, nodes and quotas changed,
time moving on) and after each step compares the engine's inputs as the cycle loads them
(through the kept rows) with a load from scratch (caches off, nothing kept).

The runtime history itself is kept for a minute by design (HISTORY_SECONDS: a job that just
finished may count one cycle late), so the fresh load applies predictions from the same
history object; what is compared is everything the kept rows and kept predictions decide.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from django.test.utils import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from gpuqueue.core import caches
from gpuqueue.core.errors import Refused
from gpuqueue.core.states import FINAL, HOLDING, JobState
from gpuqueue.cycle import job_feed, run
from gpuqueue.cycle.run import refresh_forecasts, run_cycle
from gpuqueue.cycle.snapshot import StoredPending, load_snapshot
from gpuqueue.models import Flavor, Job, JobActivity, JobArray, Node, Quota
from gpuqueue.scheduler import model as m
from gpuqueue.services.cluster.nodes import set_drained
from gpuqueue.services.forecasts import runtime_history as rh
from gpuqueue.services.jobs.admissions import Admitted, admit_all
from gpuqueue.services.jobs.array_spec import parse
from gpuqueue.services.jobs.arrays import submit_array
from gpuqueue.services.jobs.cancel import cancel_job
from gpuqueue.services.jobs.dependencies import Dependencies, submit_job_after
from gpuqueue.services.jobs.holds import update_holds
from gpuqueue.services.jobs.start_failures import requeue_after_start_failure
from gpuqueue.services.jobs.transitions import transition
from gpuqueue.services.quotas.quotas import set_quota

PRODUCT = "nvidia.com/gpu.product"
LABELS = {"h100": {PRODUCT: "NVIDIA-H100-80GB-HBM3"}, "l4": {PRODUCT: "NVIDIA-L4"}}
DEFAULT_QUOTAS = {"h100": (8, 32), "l4": (2, 8)}  # as tests/conftest.py's world has them
PICK = st.integers(0, 10_000)  # which of the current jobs or nodes a step acts on
SHAPES = {  # a submission: who, what, how urgent, and a declared runtime or none
    "who": st.integers(0, 2),
    "flavor": st.sampled_from(["h100", "l4"]),
    "workers": st.integers(1, 3),
    "gpus": st.sampled_from([1, 2, 4]),
    "priority": st.integers(-2, 2),
    "preemptible": st.booleans(),
    "runtime": st.none() | st.sampled_from([60, 600, 3600]),
    "name": st.sampled_from(["train", "eval"]),
}


def load_as_the_cycle_does(now: Any) -> tuple[m.Snapshot, m.Snapshot, dict[int, StoredPending]]:
    """The snapshot, the engine's input (with predicted runtimes) and the stored values,
    through this process's kept rows and predictions."""
    stored: dict[int, StoredPending] = {}
    snapshot = load_snapshot(now, stored)
    return snapshot, rh.with_predicted_runtimes(snapshot), stored


def load_from_scratch(
    now: Any, history: Any
) -> tuple[m.Snapshot, m.Snapshot, dict[int, StoredPending]]:
    """The same with nothing kept: caches off and predictions made anew from `history`."""
    with (
        override_settings(GPUQUEUE_CACHES=False),
        mock.patch.object(rh, "_PREDICTED_PENDING", rh._PredictedPending()),
        mock.patch.object(rh, "_PREDICTED_RUNNING", rh._PredictedRunning()),
        mock.patch.object(rh, "runtime_history", lambda: history),
    ):
        return load_as_the_cycle_does(now)


@pytest.mark.django_db(transaction=True)
def test_the_kept_snapshot_equals_a_fresh_load_after_any_sequence_of_changes(
    world: Any, backend: Any, monkeypatch: Any
) -> None:
    # The kept rows' clock, moved on with the cycle's `now` (kept rows last ten minutes, the
    # history a minute): a stand-in for `time` in the caches module only.
    real_monotonic = caches.time.monotonic
    clock = SimpleNamespace(offset=0.0)
    monkeypatch.setattr(
        caches, "time", SimpleNamespace(monotonic=lambda: real_monotonic() + clock.offset)
    )
    personas = [(world.alice, world.team_a), (world.bob, world.team_a), (world.carol, world.team_b)]
    flavors = {"h100": world.h100, "l4": world.l4}

    class Service(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            # A fresh process over a fresh queue for every example.
            Job.objects.all().delete()
            JobArray.objects.all().delete()
            Node.objects.all().delete()
            Quota.objects.all().delete()
            for team in (world.team_a, world.team_b):
                for name, (guarantee, limit) in DEFAULT_QUOTAS.items():
                    Quota.objects.create(
                        team=team, flavor=flavors[name], guarantee=guarantee, limit=limit
                    )
            # Room for a few jobs only, so that most wait and the cycle writes their reasons.
            self._node("n0", "h100", 8)
            self._node("n1", "l4", 4)
            caches.forget_everything()
            monkeypatch.setattr(rh, "_PREDICTED_PENDING", rh._PredictedPending())
            monkeypatch.setattr(rh, "_PREDICTED_RUNNING", rh._PredictedRunning())
            self.now = timezone.now()
            self.nodes_made = 2

        @staticmethod
        def _node(name: str, flavor: str, gpus: int) -> None:
            Node.objects.create(name=name, capacity={"nvidia.com/gpu": gpus}, labels=LABELS[flavor])

        @staticmethod
        def _pick(pick: int, **filters: Any) -> Job | None:
            jobs = list(Job.objects.filter(**filters).order_by("pk"))
            return jobs[pick % len(jobs)] if jobs else None

        # --- Submissions ---------------------------------------------------------------

        @initialize(shapes=st.lists(st.fixed_dictionaries(SHAPES), max_size=6))
        def a_queue(self, shapes: list[dict[str, Any]]) -> None:
            # Most sequences start from a queue, so that steps act on jobs.
            for shape in shapes:
                self.submit(**shape)

        @rule(**SHAPES)
        def submit(self, who: int, flavor: str, **shape: Any) -> None:
            user, team = personas[who]
            fields = {
                "name": shape["name"],
                "image": "ghcr.io/acme/train:1",
                "workers": shape["workers"],
                "gpus_per_worker": shape["gpus"],
                "priority": shape["priority"],
                "preemptible": shape["preemptible"],
            }
            if shape["runtime"] is not None:
                fields["expected_runtime_seconds"] = shape["runtime"]
            submit_job_after(user, team, flavors[flavor], fields)

        @rule(pick=PICK, kind=st.sampled_from(["after_ok", "after_any", "after_not_ok"]))
        def submit_after(self, pick: int, kind: str) -> None:
            upstream = self._pick(pick)
            if upstream is None:
                return
            fields = {"name": "next", "image": "ghcr.io/acme/train:1", kind: [upstream.pk]}
            submit_job_after(world.alice, world.team_a, world.h100, fields)

        @rule(size=st.integers(1, 5), cap=st.none() | st.integers(1, 3))
        def submit_array(self, size: int, cap: int | None) -> None:
            spec = f"0-{size - 1}" + (f"%{cap}" if cap else "")
            fields = {"name": "sweep", "image": "ghcr.io/acme/train:1", "gpus_per_worker": 1}
            submit_array(world.carol, world.team_b, world.l4, fields, parse(spec), Dependencies())

        # --- Jobs moving on ------------------------------------------------------------

        @rule(pick=PICK)
        def cancel(self, pick: int) -> None:
            job = self._pick(pick, state__in=[JobState.PENDING, *HOLDING])
            if job is not None:
                cancel_job(world.root, job)

        @rule(pick=PICK)
        def admit(self, pick: int) -> None:
            job = self._pick(pick, state=JobState.PENDING)
            if job is not None:
                admit_all([Admitted(job.pk, {"n0": job.workers}, False)], self.now, "cycle")

        @rule(pick=PICK)
        def start(self, pick: int) -> None:
            job = self._pick(pick, state=JobState.ADMITTED)
            if job is not None:
                transition(job, JobState.RUNNING, reason="running", actor="t", started_at=self.now)

        @rule(pick=PICK, ok=st.booleans())
        def end(self, pick: int, ok: bool) -> None:
            job = self._pick(pick, state=JobState.RUNNING)
            if job is not None:
                to = JobState.SUCCEEDED if ok else JobState.FAILED
                transition(job, to, reason="ended", actor="t", finished_at=self.now)

        @rule(pick=PICK, seconds=st.sampled_from([30, 300, 3000]))
        def runs_to_success(self, pick: int, seconds: int) -> None:
            # A whole attempt in one step, so that runtime histories grow and predictions move.
            job = self._pick(pick, state=JobState.PENDING, hold="")
            if job is None or not admit_all([Admitted(job.pk, {"n0": 1}, False)], self.now, "t"):
                return
            job.refresh_from_db()
            started = self.now - timedelta(seconds=seconds)
            transition(job, JobState.RUNNING, reason="running", actor="t", started_at=started)
            transition(job, JobState.SUCCEEDED, reason="done", actor="t", finished_at=self.now)

        @rule(pick=PICK)
        def fail_to_start(self, pick: int) -> None:
            job = self._pick(pick, state=JobState.ADMITTED)
            if job is not None:
                requeue_after_start_failure(job, "image pull failed", self.now)

        @rule(pick=PICK, active=st.booleans())
        def delete(self, pick: int, active: bool) -> None:
            # The cleanup deletes ended jobs; deleting a team takes its active ones with it.
            states = [JobState.PENDING, *HOLDING] if active else sorted(FINAL)
            job = self._pick(pick, state__in=states)
            if job is not None:
                job.delete()

        @rule(pick=PICK, idle=st.booleans(), policy=st.sampled_from(["reclaim_first", "flag"]))
        def gpu_activity(self, pick: int, idle: bool, policy: str) -> None:
            # Idle borrowers reclaimed first: the flag lives outside the job's row.
            job = self._pick(pick, state__in=sorted(HOLDING))
            if job is not None:
                JobActivity.objects.update_or_create(
                    job=job,
                    defaults={
                        "attempt": job.attempts,
                        "gpu_utilization": 0.0 if idle else 80.0,
                        "measured_at": self.now,
                        "source": "simulated",
                        "idle": idle,
                    },
                )
                Flavor.objects.filter(pk=job.flavor_id).update(idle_policy=policy)

        @rule()
        def forecast(self) -> None:
            refresh_forecasts(self.now)  # display-only writes: estimates and bands

        @rule()
        def cycle(self) -> None:
            # Admissions, reasons and positions written: the explain phase turns only new or
            # changed reasons into data (`Active.reasons`), and the rows must show the plan's.
            plans: list[m.Plan] = []
            explain = run._persist_pending

            def seen(plan: m.Plan, *args: Any) -> None:
                plans.append(plan)
                explain(plan, *args)

            with mock.patch.object(run, "_persist_pending", seen):
                run_cycle(self.now, backend)
            shown = {
                job_id: (reason, team, cluster)
                for job_id, reason, team, cluster in Job.objects.filter(
                    state=JobState.PENDING
                ).values_list(
                    "id",
                    "standing__reason",
                    "standing__queue_position",
                    "standing__cluster_position",
                )
            }
            for plan in plans:
                for d in plan.pending:
                    if d.job_id in shown:
                        wanted = (run.reason_as_data(d.reason), d.team_position, d.cluster_position)
                        assert shown[d.job_id] == wanted

        @rule()
        def holds(self) -> None:
            update_holds(self.now)  # the cycle's hold phase alone

        # --- The cluster and the quotas ------------------------------------------------

        @rule(flavor=st.sampled_from(["h100", "l4"]), gpus=st.sampled_from([4, 8]))
        def add_node(self, flavor: str, gpus: int) -> None:
            self._node(f"n{self.nodes_made}", flavor, gpus)
            self.nodes_made += 1

        @rule(pick=PICK, change=st.sampled_from(["cordon", "drain", "external", "remove"]))
        def change_node(self, pick: int, change: str) -> None:
            nodes = list(Node.objects.order_by("name"))
            if not nodes:
                return
            node = nodes[pick % len(nodes)]
            if change == "cordon":
                Node.objects.filter(pk=node.pk).update(cordoned=not node.cordoned)
            elif change == "drain":
                set_drained(world.root, node, not node.drained)
            elif change == "external":
                used = {} if node.used_externally else {"nvidia.com/gpu": 2}
                Node.objects.filter(pk=node.pk).update(used_externally=used)
            else:
                node.delete()

        @rule(
            team=st.sampled_from(["team_a", "team_b"]),
            flavor=st.sampled_from(["h100", "l4"]),
            guarantee=st.integers(0, 8),
            extra=st.integers(0, 16),
            weight=st.sampled_from([0.5, 1.0, 2.0]),
        )
        def change_quota(
            self, team: str, flavor: str, guarantee: int, extra: int, weight: float
        ) -> None:
            # Below what non-preemptible jobs hold it is refused, and nothing is written.
            with contextlib.suppress(Refused):
                set_quota(
                    world.root,
                    getattr(world, team),
                    flavors[flavor],
                    guarantee=guarantee,
                    limit=guarantee + extra,
                    weight=weight,
                    oversubscribe=True,
                )

        @rule(seconds=st.sampled_from([1, 31, 61, 601]))
        def time_moves_on(self, seconds: int) -> None:
            # Past a backoff's not_before (30 s first), the history's minute, the rows' ten.
            self.now += timedelta(seconds=seconds)
            clock.offset += seconds

        # --- The property --------------------------------------------------------------

        @invariant()
        def kept_load_equals_fresh_load(self) -> None:
            snapshot, engine_input, stored = load_as_the_cycle_does(self.now)
            # The history the cycle's load used (kept HISTORY_SECONDS; none have passed since).
            fresh = load_from_scratch(self.now, rh.runtime_history())
            assert snapshot.pending == fresh[0].pending
            assert snapshot == fresh[0]
            assert engine_input == fresh[1]
            assert stored == fresh[2]
            # The reasons kept beside what the rows show are what they show.
            kept = job_feed._kept.get(job_feed._KEY, job_feed._VERSION)
            for job_id, reason in (kept.reasons if kept is not None else {}).items():
                assert kept.shown[job_id][0] == run.reason_as_data(reason)

    run_state_machine_as_test(
        Service,
        settings=settings(
            max_examples=60,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
