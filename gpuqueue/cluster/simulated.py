"""A virtual cluster for the embedded mode, demos and end-to-end tests.

Nodes come from a YAML file (re-read when it changes, so a test or a demo can take a node down by
editing it). A launched job runs in real time for the seconds in its annotation
`gpuqueue.dev/sim-duration-seconds` (without it, its declared expected runtime; with neither,
60; never past its max runtime), then succeeds, or
fails with the exit code in `gpuqueue.dev/sim-exit-code`. A checkpoint request is acknowledged
after GPUQUEUE_SIM_CHECKPOINT_SECONDS with a location that records the progress made, and a
resumed attempt only runs what was left. A stopped workload's pods take `termination_seconds`
(0 unless told) to go: meanwhile its GPUs are draining for its job, as a real cluster's
terminating pods are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from gpuqueue.cluster.base import (
    ClusterBackend,
    LaunchSpec,
    LogNotFound,
    LogQuery,
    NodeInfo,
    Phase,
    WorkerLog,
    WorkloadStatus,
    gpu_model_of,
)
from gpuqueue.cluster.inventory import amount
from gpuqueue.cluster.sim_log import SimulatedRun, simulated_log

DURATION_ANNOTATION = "gpuqueue.dev/sim-duration-seconds"
EXIT_CODE_ANNOTATION = "gpuqueue.dev/sim-exit-code"
DEFAULT_DURATION_SECONDS = 60.0
# Kept in a workload's env, besides what the job asked for: what its pods hold, and until when
# a stopped workload's pods are terminating.
GPUS_KEY, RESOURCE_KEY, TERMINATING_KEY = (
    "sim_gpus_per_worker",
    "sim_resource",
    "sim_terminating_until",
)


def load_cluster_file(path: Path) -> list[NodeInfo]:
    """Parse the cluster YAML: entries with `name` (may hold `{i}`), `count`, `labels`,
    `capacity` and optional `taints`, `ready` / `cordoned`, `allocatable` CPU, memory and pods
    and what the node's own pods (DaemonSets, system pods) request of them,
    `requested_by_others`, as Kubernetes quantities ("224", "2Ti", 110)."""
    data = yaml.safe_load(path.read_text()) or {}
    nodes: list[NodeInfo] = []
    for entry in data.get("nodes", []):
        count = int(entry.get("count", 1))
        allocatable = entry.get("allocatable") or {}
        others = entry.get("requested_by_others") or {}

        for i in range(count):
            name = str(entry["name"]).format(i=i)
            labels = {str(k): str(v) for k, v in (entry.get("labels") or {}).items()}
            nodes.append(
                NodeInfo(
                    name=name,
                    capacity={str(k): int(v) for k, v in (entry.get("capacity") or {}).items()},
                    labels=labels,
                    gpu_model=gpu_model_of(labels),
                    taints=[
                        {str(k): str(v) for k, v in taint.items()}
                        for taint in entry.get("taints") or []
                    ],
                    ready=bool(entry.get("ready", True)),
                    cordoned=bool(entry.get("cordoned", False)),
                    allocatable_cpu_millicores=_limit(allocatable, "cpu", 1000),
                    allocatable_memory_bytes=_limit(allocatable, "memory", 1),
                    allocatable_pods=_limit(allocatable, "pods", 1),
                    external_cpu_millicores=amount(others.get("cpu", 0), 1000),
                    external_memory_bytes=amount(others.get("memory", 0), 1),
                    external_pods=amount(others.get("pods", 0), 1),
                )
            )
    return nodes


def _limit(allocatable: Mapping[str, Any], resource: str, scale: int) -> int | None:
    value = allocatable.get(resource)
    return None if value is None else amount(value, scale)


def _progress_of(location: str) -> float:
    """The seconds of work a simulated checkpoint location records (0 when none)."""
    if not location:
        return 0.0
    values = parse_qs(urlparse(location).query).get("progress", ["0"])
    try:
        return float(values[0])
    except ValueError:
        return 0.0


class SimulatedBackend(ClusterBackend):
    name = "simulated"
    withdraws_checkpoints = True

    def __init__(
        self,
        cluster_file: Path,
        *,
        startup_seconds: float = 1.0,
        checkpoint_seconds: float = 2.0,
        clock: Callable[[], datetime] = timezone.now,
        termination_seconds: float = 0.0,
    ) -> None:
        self.cluster_file = cluster_file
        self.startup = timedelta(seconds=startup_seconds)
        self.checkpoint_delay = timedelta(seconds=checkpoint_seconds)
        self.clock = clock
        self.termination = timedelta(seconds=termination_seconds)
        self._nodes_cache: tuple[float, list[NodeInfo]] | None = None

    @classmethod
    def from_settings(cls) -> SimulatedBackend:
        return cls(
            Path(settings.GPUQUEUE_SIM_CLUSTER),
            startup_seconds=settings.GPUQUEUE_SIM_STARTUP_SECONDS,
            checkpoint_seconds=settings.GPUQUEUE_SIM_CHECKPOINT_SECONDS,
        )

    def list_nodes(self, live: Collection[tuple[int, int]] | None = None) -> list[NodeInfo]:
        mtime = self.cluster_file.stat().st_mtime
        if self._nodes_cache is None or self._nodes_cache[0] != mtime:
            self._nodes_cache = (mtime, load_cluster_file(self.cluster_file))
        nodes = list(self._nodes_cache[1])
        if self.termination:
            draining = self._terminating_use()
            nodes = [
                replace(n, draining=draining[n.name]) if n.name in draining else n for n in nodes
            ]
        return nodes

    def _terminating_use(self) -> dict[str, dict[int, dict[str, int]]]:
        """node -> job id -> resource -> GPUs that stopped workloads' pods hold until they are
        gone (deleting those that are gone by now)."""
        from gpuqueue.models import SimulatedWorkload

        now = self.clock()
        draining: dict[str, dict[int, dict[str, int]]] = {}
        for workload in SimulatedWorkload.objects.filter(env__has_key=TERMINATING_KEY):
            if datetime.fromisoformat(workload.env[TERMINATING_KEY]) <= now:
                workload.delete()
                continue
            resource = str(workload.env.get(RESOURCE_KEY, "nvidia.com/gpu"))
            per = int(workload.env.get(GPUS_KEY, 0))
            for node, workers in workload.placement.items():
                held = draining.setdefault(node, {}).setdefault(workload.job_id, {})
                held[resource] = held.get(resource, 0) + int(workers) * per
        return draining

    def launch(self, spec: LaunchSpec) -> str | None:
        outcome = self.launch_all([spec])[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def launch_all(self, specs: Sequence[LaunchSpec]) -> list[str | None | Exception]:
        """Every workload in one INSERT; one already there (a launch retried) is left as it
        is. Should the database refuse the batch, each row is written alone, so that one bad
        job fails by itself as a launch of its own would. The simulated workload acknowledges
        checkpoints itself: no token."""
        from gpuqueue.models import SimulatedWorkload

        now = self.clock()
        outcomes: list[str | None | Exception] = []
        rows: dict[int, Any] = {}  # index of the spec -> its row
        for index, spec in enumerate(specs):
            try:
                rows[index] = self._workload(spec, now)
                outcomes.append(None)
            except Exception as exc:  # noqa: BLE001 - this job fails, the others launch
                outcomes.append(exc)
        try:
            with transaction.atomic():
                _insert_workloads(list(rows.values()))
        except DatabaseError:
            for index, row in rows.items():
                try:
                    with transaction.atomic():
                        SimulatedWorkload.objects.bulk_create([row], ignore_conflicts=True)
                except DatabaseError as exc:
                    outcomes[index] = exc
        return outcomes

    def _workload(self, spec: LaunchSpec, now: datetime) -> Any:
        from gpuqueue.models import SimulatedWorkload

        duration = _annotation_float(spec.annotations, DURATION_ANNOTATION, _declared(spec))
        # A resumed attempt only runs the work its checkpoint did not cover.
        remaining = max(0.0, duration - _progress_of(spec.checkpoint_location))
        exit_code = int(_annotation_float(spec.annotations, EXIT_CODE_ANNOTATION, 0))
        if spec.max_runtime_seconds is not None and remaining > spec.max_runtime_seconds:
            remaining = float(spec.max_runtime_seconds)
            exit_code = exit_code or 124  # killed at its deadline, like activeDeadlineSeconds
        ready_at = now + self.startup
        return SimulatedWorkload(
            job_id=spec.job_id,
            attempt=spec.attempt,
            placement=dict(spec.placement),
            created_at=now,
            ready_at=ready_at,
            ends_at=ready_at + timedelta(seconds=remaining),
            exit_code=exit_code,
            # The job's own variables first: a user's variable named like one of the keys kept
            # here (env names may be lower case) must not change what the simulation believes.
            env={
                **{name: value for name, value in spec.env.items() if name != TERMINATING_KEY},
                "prior_progress": duration - remaining,
                GPUS_KEY: spec.resource_per_worker,
                RESOURCE_KEY: spec.resource_name,
            },
        )

    def request_checkpoint(self, job_id: int, attempt: int, deadline: datetime) -> None:
        from gpuqueue.models import SimulatedWorkload

        SimulatedWorkload.objects.filter(
            job_id=job_id, attempt=attempt, checkpoint_requested_at__isnull=True
        ).update(checkpoint_requested_at=self.clock(), checkpoint_deadline=deadline)

    def withdraw_checkpoint(self, job_id: int, attempt: int) -> None:
        from gpuqueue.models import SimulatedWorkload

        SimulatedWorkload.objects.filter(job_id=job_id, attempt=attempt).update(
            checkpoint_requested_at=None, checkpoint_deadline=None, checkpoint_location=""
        )

    def stop(self, job_id: int, attempt: int) -> None:
        from gpuqueue.models import SimulatedWorkload

        workloads = SimulatedWorkload.objects.filter(job_id=job_id, attempt=attempt)
        if not self.termination:
            workloads.delete()
            return
        until = (self.clock() + self.termination).isoformat()
        for workload in workloads.exclude(env__has_key=TERMINATING_KEY):
            workload.env = {**workload.env, TERMINATING_KEY: until}
            workload.save(update_fields=["env"])

    def observe(self) -> list[WorkloadStatus]:
        from gpuqueue.models import SimulatedWorkload

        now = self.clock()
        down = {node.name for node in self.list_nodes() if not node.ready}
        statuses = []
        workloads = SimulatedWorkload.objects.exclude(env__has_key=TERMINATING_KEY)
        for workload in workloads.order_by("job_id", "attempt"):  # stopped ones are gone
            statuses.append(self._status(workload, now, down))
        return statuses

    def read_log(self, job_id: int, attempt: int, worker: int, query: LogQuery) -> WorkerLog:
        """Lines made up from the workload's run so far (gpuqueue.cluster.sim_log); gone with
        the workload, as a pod's log goes with the pod."""
        from gpuqueue.models import SimulatedWorkload

        workload = SimulatedWorkload.objects.filter(job_id=job_id, attempt=attempt).first()
        workers = sum(int(n) for n in workload.placement.values()) if workload else 0
        if workload is None or not 0 <= worker < workers:
            raise LogNotFound(f"job {job_id} has no worker {worker} in attempt {attempt}")
        run = SimulatedRun(
            job_id=job_id,
            attempt=attempt,
            worker=worker,
            workers=workers,
            ready_at=workload.ready_at,
            ends_at=workload.ends_at,
            exit_code=workload.exit_code,
            prior_steps=int(float(workload.env.get("prior_progress", 0))),
        )
        return simulated_log(run, self.clock(), query)

    def _status(self, workload: Any, now: datetime, down: set[str]) -> WorkloadStatus:
        location = None
        if workload.checkpoint_requested_at is not None:
            if workload.checkpoint_location:
                location = workload.checkpoint_location
            elif now >= workload.checkpoint_requested_at + self.checkpoint_delay:
                progress = workload.env.get("prior_progress", 0) + max(
                    0.0, (workload.checkpoint_requested_at - workload.ready_at).total_seconds()
                )
                location = (
                    f"sim://checkpoints/job-{workload.job_id}/attempt-{workload.attempt}"
                    f"?progress={progress:.0f}"
                )
                type(workload).objects.filter(pk=workload.pk).update(checkpoint_location=location)
        lost = sorted(set(workload.placement) & down)
        if lost:
            return WorkloadStatus(
                workload.job_id,
                workload.attempt,
                Phase.LOST,
                now,
                message=f"node {', '.join(lost)} is not ready",
                checkpoint_location=location,
            )
        if now < workload.ready_at:
            phase, since = Phase.STARTING, workload.created_at
        elif now < workload.ends_at:
            phase, since = Phase.RUNNING, workload.ready_at
        elif workload.exit_code == 0:
            phase, since = Phase.SUCCEEDED, workload.ends_at
        else:
            phase, since = Phase.FAILED, workload.ends_at
        message = f"exit code {workload.exit_code}" if phase is Phase.FAILED else ""
        return WorkloadStatus(
            workload.job_id,
            workload.attempt,
            phase,
            since,
            exit_code=workload.exit_code if phase in (Phase.SUCCEEDED, Phase.FAILED) else None,
            message=message,
            checkpoint_location=location,
        )


_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def _insert_workloads(rows: list[Any]) -> None:
    """INSERT the workloads (SimulatedWorkload instances) in one statement of one parameter
    per column, leaving any attempt already there as it is: a wave launches thousands at once,
    and an ORM insert prepares every value of every row. JSON columns go as one JSON array
    each, unpacked in order."""
    from gpuqueue.models import SimulatedWorkload

    if not rows:
        return
    table = connection.ops.quote_name(SimulatedWorkload._meta.db_table)
    as_json = (
        "ARRAY(SELECT e FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY t (e, n) ORDER BY n)"
    )
    sql = (
        f"INSERT INTO {table} (job_id, attempt, placement, created_at, ready_at, ends_at, "
        "exit_code, checkpoint_location, env) "
        # The arrays in binary (%b): as text, psycopg escapes every element by a regular expression.
        "SELECT j, a, p, c, r, e, x, '', v FROM unnest(%b::bigint[], %b::int[], "
        f"{as_json}, %b::timestamptz[], %b::timestamptz[], %b::timestamptz[], %b::int[], "
        f"{as_json}) AS w (j, a, p, c, r, e, x, v) ON CONFLICT DO NOTHING"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            [
                [w.job_id for w in rows],
                [w.attempt for w in rows],
                json.dumps([w.placement for w in rows]),
                [w.created_at for w in rows],
                [w.ready_at for w in rows],
                [w.ends_at for w in rows],
                [w.exit_code for w in rows],
                json.dumps([w.env for w in rows]),
            ],
        )


def _declared(spec: LaunchSpec) -> float:
    """What a job without the simulator's annotation runs for: the expected runtime its user
    declared (the demo's jobs then run as long as they say), else the default."""
    if spec.expected_runtime_seconds:
        return float(spec.expected_runtime_seconds)
    return DEFAULT_DURATION_SECONDS


def _annotation_float(annotations: Any, key: str, default: float) -> float:
    value = str(annotations.get(key, "")).strip()
    return float(value) if _NUMBER.match(value) else default
