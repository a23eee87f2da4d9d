"""gpuqueue and Kueue side by side on the same real control plane. Prints numbers; not a test.

    .venv/bin/python -m benchmarks.peers.side_by_side                       # kai: 500 nodes
    .venv/bin/python -m benchmarks.peers.side_by_side --scenario baseline   # Kueue's, scaled
    .venv/bin/python -m benchmarks.peers.side_by_side --scenario contended  # reclaim
    .venv/bin/python -m benchmarks.peers.side_by_side --nodes 100 --jobs 800 --gangs 10

The scenarios (teams, quotas, workloads) are benchmarks/peers/shapes.py's. For each system, one
at a time (--systems gives the order), on a fresh control plane of tests/kube/controlplane.py
(started by benchmarks/kube_scale.py's `start_cluster`, its kube-apiserver writing an audit log)
with the same kwok nodes (× 8 H100) and team namespaces:

- gpuqueue: the scenario's teams and quotas as rows, then jobs through `submit_job`, admission
  cycles and cluster syncs as the service runs them (kube_scale's `run_phase`; the contended
  mix: `contend_gpuqueue`).
- Kueue (benchmarks/peers/kueue.py): its CRDs from its module, the same quotas as ClusterQueues
  of one cohort (`queue_objects` of the Quota rows), a LocalQueue per team namespace, its
  controller manager as a local process; the benchmark creates batch/v1 Jobs already suspended
  with the queue label (a gang: one Job, parallelism = completions = workers), 16 at once.

Per phase and system: seconds from the first submission until every pod is bound; admissions
per second (admitted jobs over the time of the last admission: gpuqueue's cycle persisted it,
Kueue's Workload is Admitted); the apiserver requests of the system's own client and of every
client (from the audit log, by user agent); CPU seconds of the system (gpuqueue: this process,
which submits, plans and launches, plus PostgreSQL and Redis, less the benchmark's own pod watch
threads; Kueue: its manager process) and of kube-apiserver and etcd. The contended mix instead:
when the first wave held every GPU, how long the team under its guarantee waited for it, and
each team's GPUs over time (a pod watch: bound and neither deleted nor finished). The
calibration is taken before and after each system.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import kube_scale  # noqa: E402
from benchmarks.peers import kueue, shapes  # noqa: E402

BENCH_AGENT = "peers-bench"  # the benchmark's own clients (driving Kueue, reading, emptying)
GPUQUEUE_AGENT = "gpuqueue"
KUEUE_AGENT = "kueue"
RUN_LABEL = "peers-run"
# A preempted workload saves and stops in this long: kwok deletes a pod this long after its
# deletion began (scripts/controlplane/kwok.yaml); gpuqueue's acknowledges its checkpoint so.
SAVE_SECONDS = 0.5
CYCLE_EVERY = 1.0  # seconds: the service's nudges are debounced to one a second
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
"""


# Counting ----------------------------------------------------------------------------------


class Audit:
    """The apiserver's audit log: requests by user agent (its first word) and verb."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.policy = folder / "audit-policy.yaml"
        self.policy.write_text(AUDIT_POLICY)
        self.path = folder / "audit.log"

    def apiserver_args(self) -> tuple[str, ...]:
        return (
            f"--audit-policy-file={self.policy}",
            f"--audit-log-path={self.path}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
        )

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def count(self, since: int) -> dict[str, Counter[str]]:
        """Requests logged after `since`: a request once it completed, a watch once started."""
        time.sleep(1.0)  # the last responses' events
        with open(self.path, "rb") as f:
            f.seek(since)
            data = f.read()
        counts: dict[str, Counter[str]] = {}
        for line in data.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            verb, stage = event.get("verb", "?"), event.get("stage")
            if (verb == "watch") != (stage == "ResponseStarted"):
                continue
            if stage not in ("ResponseStarted", "ResponseComplete"):
                continue
            agent = (event.get("userAgent") or "?").split("/", 1)[0].split(" ", 1)[0]
            counts.setdefault(agent, Counter())[verb] += 1
        return counts


def cpu_of(pid: int) -> float:
    """CPU seconds of a process and of its children it reaped."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(t.user + t.system + t.children_user + t.children_system)


def services_pids(exclude: set[int]) -> list[int]:
    """This process and its descendants (PostgreSQL, Redis), less `exclude` (the control plane,
    Kueue) and their descendants."""
    import psutil

    me = psutil.Process()
    skip = set(exclude)
    for pid in exclude:
        with contextlib.suppress(psutil.Error):
            skip |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
    return [me.pid] + [c.pid for c in me.children(recursive=True) if c.pid not in skip]


class Cpu:
    """CPU seconds of named process groups between `start()` and `stop()`."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups
        self.before: dict[int, float] = {}

    def start(self) -> Cpu:
        self.before = {pid: cpu_of(pid) for pids in self.groups.values() for pid in pids}
        return self

    def stop(self) -> dict[str, float]:
        return {
            name: sum(cpu_of(pid) - self.before.get(pid, 0.0) for pid in pids)
            for name, pids in self.groups.items()
        }


def plane_groups(plane: Any) -> dict[str, list[int]]:
    return {
        "kube-apiserver + etcd": [
            plane.processes[n].pid for n in ("kube-apiserver", "etcd") if n in plane.processes
        ],
        "scheduler + controller-manager + kwok": [
            plane.processes[n].pid
            for n in ("kube-scheduler", "kube-controller-manager", "kwok")
            if n in plane.processes
        ],
    }


# The world -----------------------------------------------------------------------------------


def build_teams(specs: tuple[shapes.TeamSpec, ...]) -> tuple[Any, Any, dict[str, Any]]:
    """The flavor h100, the scenario's teams (namespace = slug) with their quotas, one member."""
    from django.contrib.auth import get_user_model

    from gpuqueue.models import Flavor, Quota
    from teams.models import Membership, Role, Team

    flavor = Flavor.objects.create(
        name="h100", resource_name="nvidia.com/gpu", node_selector=dict(kube_scale.H100)
    )
    user = get_user_model().objects.create_user("bench", password="bench-pass-1")
    teams = {}
    for spec in specs:
        team = Team.objects.create(slug=spec.slug, name=spec.slug, namespace=spec.slug)
        Quota.objects.create(
            team=team, flavor=flavor, guarantee=spec.guarantee, limit=spec.limit, weight=spec.weight
        )
        Membership.objects.create(user=user, team=team, role=Role.MEMBER)
        teams[spec.slug] = team
    return flavor, user, teams


def sim(seconds: float) -> dict[str, str]:
    return {"gpuqueue.dev/sim-duration-seconds": f"{seconds:g}"}


def calibrated(results: list[dict[str, Any]], before: float) -> None:
    """Record the calibration before and after a system's run in each of its results."""
    after = kube_scale.calibration() * 1000
    print(f"calibration after: {after:.1f} ms", flush=True)
    for r in results:
        r["calibration_ms"] = [round(before, 1), round(after, 1)]


# Watching pods -----------------------------------------------------------------------------


class Watcher:
    """Raw watches of the run's pods (when each is first seen bound, and first seen deleted or
    finished, with its namespace and GPUs) and of Workloads (when each is first seen
    Admitted; Kueue only), each in a thread of its own."""

    def __init__(self, kubeconfig: Path, label: str, timeout: float, workloads: bool) -> None:
        from kubernetes import client

        from tests.kube.controlplane import api_client_for

        self.lock = threading.Lock()
        self.bound: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.pods: dict[str, tuple[str, int]] = {}  # uid: (namespace, GPUs)
        self.admitted: dict[str, float] = {}
        self.responses: list[Any] = []
        self.closed = False
        # Each watch thread's CPU so far: the benchmark's own, taken out of gpuqueue's (this
        # process's) CPU, as Kueue's count never holds it.
        self.thread_cpu: dict[int, float] = {}
        seconds = int(timeout) + 120
        api = api_client_for(kubeconfig)
        api.user_agent = BENCH_AGENT
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

        def pods() -> Any:
            return core.list_pod_for_all_namespaces(
                label_selector=f"{RUN_LABEL}={label}",
                watch=True,
                timeout_seconds=seconds,
                _preload_content=False,
            )

        def workload_list() -> Any:
            return custom.list_cluster_custom_object(
                "kueue.x-k8s.io",
                "v1beta2",
                "workloads",
                watch=True,
                timeout_seconds=seconds,
                _preload_content=False,
            )

        follow: list[tuple[Any, Any]] = [(pods, self._pod)]
        if workloads:
            follow.append((workload_list, self._workload))
        for start, seen in follow:
            threading.Thread(target=self._follow, args=(start, seen), daemon=True).start()

    def _follow(self, start: Any, seen: Any) -> None:
        """Follow a watch; one the server ends (an ERROR event, a closed stream) starts again
        (its first events list what exists, which changes no first-seen time)."""
        while not self.closed:
            buffer = b""
            try:
                response = start()
                with self.lock:
                    self.responses.append(response)
                for chunk in response.stream(65536):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        event = json.loads(line) if line.strip() else {}
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            seen(event["object"], time.perf_counter(), event["type"])
                        elif event.get("type") == "ERROR":
                            print(f"watch error: {event.get('object')}", flush=True)
                    self.thread_cpu[threading.get_ident()] = time.thread_time()
            except Exception as exc:  # noqa: BLE001 - shut at the end of the phase
                if not self.closed:
                    print(f"watch ended: {exc!r}; again", flush=True)
                    time.sleep(0.5)

    def _pod(self, pod: dict[str, Any], at: float, kind: str) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        uid = meta["uid"]
        phase = (pod.get("status") or {}).get("phase")
        with self.lock:
            if spec.get("nodeName") and uid not in self.bound:
                self.bound[uid] = at
                gpus = sum(
                    int(((c.get("resources") or {}).get("requests") or {}).get("nvidia.com/gpu", 0))
                    for c in spec.get("containers") or []
                )
                self.pods[uid] = (meta.get("namespace", ""), gpus)
            ended = (
                kind == "DELETED"
                or meta.get("deletionTimestamp")
                or phase
                in (
                    "Succeeded",
                    "Failed",
                )
            )
            if ended and uid not in self.gone:
                self.gone[uid] = at

    def _workload(self, workload: dict[str, Any], at: float, kind: str) -> None:
        conditions = (workload.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conditions):
            with self.lock:
                self.admitted.setdefault(workload["metadata"]["uid"], at)

    def held(self, at: float | None = None) -> Counter[str]:
        """GPUs by namespace of the pods bound and neither deleted nor finished (at `at`)."""
        out: Counter[str] = Counter()
        with self.lock:
            for uid, bound in self.bound.items():
                gone = self.gone.get(uid)
                now = at is None
                if (now and gone is None) or (
                    not now and bound <= at and (gone is None or gone > at)  # type: ignore[operator]
                ):
                    namespace, gpus = self.pods[uid]
                    out[namespace] += gpus
        return out

    def shares(self, started: float, until: float, step: float = 0.5) -> list[dict[str, Any]]:
        """Each team's GPUs every `step` seconds from `started`."""
        samples = []
        t = 0.0
        while started + t <= until + 1e-9:
            samples.append({"t": round(t, 1), **dict(sorted(self.held(started + t).items()))})
            t += step
        return samples

    def close(self) -> None:
        """Shut the sockets under the readers (closing the responses would wait for them)."""
        self.closed = True
        with self.lock:
            responses = list(self.responses)
        for response in responses:
            with contextlib.suppress(Exception):
                response.shutdown()


def wait_contended(
    system: str,
    watcher: Watcher,
    scenario: shapes.Scenario,
    phase: shapes.Phase,
    started: float,
    submit_later: Any,
    step: Any,
    timeout: float,
    settle: float = 10.0,
) -> dict[str, Any]:
    """Drive (`step`) until the first wave holds every GPU, then submit the later wave, then
    until its team holds what it asked for, and `settle` seconds more. Returns the times."""
    total = scenario.nodes * shapes.GPUS_PER_NODE
    late_team = phase.later[0].team
    wanted = sum(j.workers * j.gpus for j in phase.later)
    full_at = later_at = honoured_at = None
    reported = 0.0
    while True:
        now = time.perf_counter() - started
        if now > timeout:
            print(f"[{system}] timed out at {now:.0f} s", flush=True)
            break
        step()
        held = watcher.held()
        now = time.perf_counter() - started
        if full_at is None and sum(held.values()) >= total:
            full_at = now
            submit_later()
            later_at = time.perf_counter() - started
            print(
                f"[{system}] {now:6.1f} s: every GPU held {dict(held)}; later wave in", flush=True
            )
        if later_at is not None and honoured_at is None and held[late_team] >= wanted:
            honoured_at = now
            print(f"[{system}] {now:6.1f} s: {late_team} holds {held[late_team]}", flush=True)
        if honoured_at is not None and now - honoured_at >= settle:
            break
        if now - reported >= 5:
            print(f"[{system}] {now:6.1f} s: {dict(sorted(held.items()))}", flush=True)
            reported = now
    end = time.perf_counter()
    return {
        "full_s": full_at,
        "later_s": later_at,
        "honoured_s": honoured_at,
        "waited_s": None if honoured_at is None or later_at is None else honoured_at - later_at,
        "shares": watcher.shares(started, end),
        "preempted_pods": sum(
            1
            for uid, gone in watcher.gone.items()
            if uid in watcher.bound and watcher.pods[uid][0] != late_team
        ),
    }


# gpuqueue ----------------------------------------------------------------------------------


class Service:
    """gpuqueue as it is deployed: the watcher (a thread here, its own backend following the
    cluster by watches and running a sync pass after every change: jobs' states, gangs
    released, checkpoint deadlines, finished work) and the worker's admission cycles (this
    thread, another backend: launches), both sending the user agent GPUQUEUE_AGENT."""

    def __init__(self, plane: Any, namespaces: list[str], nodes: int) -> None:
        self.watching = kube_scale.make_backend(plane.kubeconfig, namespaces)
        self.launching = kube_scale.make_backend(plane.kubeconfig, namespaces)
        for backend in (self.watching, self.launching):
            backend.api_client.user_agent = GPUQUEUE_AGENT
        kube_scale.take_inventory(self.launching, nodes)
        self.stopping = False
        # CPU of the sync's and the cycle's own threads (not their pools' requests): where
        # gpuqueue's own CPU goes, by part.
        self.cycle_cpu = 0.0
        self.pass_cpu: list[float] = []  # each sync pass's
        self.acker: threading.Thread | None = None
        self.last_cycle = 0.0
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        from django.db import connection

        from gpuqueue.cycle.cluster_sync import sync_cluster

        def sync() -> None:
            began = time.thread_time()
            try:
                sync_cluster(self.watching)
                self.pass_cpu.append(time.thread_time() - began)
            except Exception as exc:  # noqa: BLE001 - the watcher goes on, as the service's
                print(f"sync failed: {exc!r}", flush=True)

        try:
            self.watching.watch(
                lambda: self.stopping,
                sync,
                sync_seconds=1.0,
                resync_seconds=300.0,
                watch_seconds=240.0,
            )
        finally:
            connection.close()

    def cycle(self, admitted: list[tuple[float, int]], started: float) -> None:
        """One admission cycle while jobs are pending, at most one a second: the service's
        pace when nudged all the time (a nudge at most each second, else its beat each 3 s)."""
        from gpuqueue.core.states import JobState
        from gpuqueue.cycle.run import run_cycle
        from gpuqueue.models import Job

        wait = self.last_cycle + CYCLE_EVERY - time.perf_counter()
        if wait > 0:
            time.sleep(min(wait, 0.2))
            return
        if Job.objects.filter(state=JobState.PENDING).exists():
            self.last_cycle = time.perf_counter()
            began = time.thread_time()
            result = run_cycle(backend=self.launching)
            self.cycle_cpu += time.thread_time() - began
            if result.admitted:
                persisted = sum(v for k, v in result.phase_seconds.items() if k <= "4_persist")
                at = time.perf_counter() - started - sum(result.phase_seconds.values())
                admitted.append((at + persisted, len(result.admitted)))
                return
        time.sleep(0.2)

    def acknowledge_checkpoints(self, after: float = SAVE_SECONDS) -> None:
        """Play the workloads' part of the checkpoint protocol, as gpuqueue's helper does: a
        preempted job says it saved `after` seconds after it was asked (what kwok gives a pod
        that got SIGTERM, Kueue's signal, to exit: the same workload, saving as fast)."""
        self.acker = threading.Thread(target=self._acknowledge, args=(after,), daemon=True)
        self.acker.start()

    def _acknowledge(self, after: float) -> None:
        from datetime import timedelta

        from django.db import connection
        from django.utils import timezone

        from gpuqueue.core.states import JobState
        from gpuqueue.models import Job
        from gpuqueue.services.jobs.checkpoint import acknowledge_checkpoint

        try:
            while not self.stopping:
                asked_before = timezone.now() - timedelta(seconds=after)
                for job in Job.objects.filter(
                    state=JobState.PREEMPTING,
                    checkpoint_acked_at__isnull=True,
                    checkpoint_requested_at__lte=asked_before,
                ):
                    acknowledge_checkpoint(job, f"s3://bench/{job.pk}", "workload")
                time.sleep(0.1)
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopping = True
        self.thread.join(30)
        if self.acker is not None:
            self.acker.join(5)


def submit_all(
    world: Any, label: str, jobs: tuple[shapes.JobShape, ...], extra: dict[str, Any]
) -> None:
    from gpuqueue.services.jobs.submit import submit_job

    flavor, user, teams = world
    fields = {"name": label, "image": "ghcr.io/acme/train:1", **extra}
    for j in jobs:
        shaped = {"workers": j.workers, "gpus_per_worker": j.gpus, "annotations": sim(j.seconds)}
        submit_job(user, teams[j.team], flavor, {**fields, **shaped})


def run_gpuqueue(
    args: argparse.Namespace, tmp: Path, scenario: shapes.Scenario, world: Any
) -> list[dict[str, Any]]:
    from kubernetes import client

    _, _, teams = world
    namespaces = list(teams)
    audit = Audit(tmp / "audit")
    plane, admin = kube_scale.start_cluster(
        tmp, scenario.nodes, namespaces, apiserver_args=audit.apiserver_args()
    )
    admin.user_agent = BENCH_AGENT
    results: list[dict[str, Any]] = []
    try:
        core, batch = client.CoreV1Api(admin), client.BatchV1Api(admin)
        for i, phase in enumerate(scenario.phases):
            if i:
                kube_scale.empty_cluster(core, batch, namespaces)
            service = Service(plane, namespaces, scenario.nodes)
            pids = services_pids({p.pid for p in plane.processes.values()})
            cpu = Cpu({"system": pids, **plane_groups(plane)}).start()
            mark = audit.mark()
            extra = {
                "labels": {RUN_LABEL: phase.label},
                "checkpoint_grace_seconds": scenario.grace_seconds,
            }
            watcher = Watcher(plane.kubeconfig, phase.label, args.timeout, workloads=False)
            admitted: list[tuple[float, int]] = []
            steady: dict[str, float] | None = None
            try:
                started = time.perf_counter()
                submit_all(world, phase.label, phase.jobs, extra)
                submitted = time.perf_counter() - started
                submit_cpu = cpu.stop()["system"]  # the API's part (Kueue's is not counted)
                print(f"[gpuqueue {phase.label}] submitted in {submitted:.1f} s", flush=True)
                step = functools.partial(service.cycle, admitted, started)
                if phase.later:
                    service.acknowledge_checkpoints()
                    out = wait_contended(
                        "gpuqueue",
                        watcher,
                        scenario,
                        phase,
                        started,
                        functools.partial(submit_all, world, phase.label, phase.later, extra),
                        step,
                        args.timeout,
                    )
                else:
                    wait_bound("gpuqueue", watcher, phase, started, step, args.timeout)
                    steady = steady_passes(service, step, args.steady)
            finally:
                watcher.close()
                service.stop()
                print(
                    f"[gpuqueue {phase.label}] {len(service.pass_cpu)} syncs, their thread's CPU"
                    f" {sum(service.pass_cpu):.1f} s; the cycles' thread's CPU"
                    f" {service.cycle_cpu:.1f} s",
                    flush=True,
                )
            seconds = cpu.stop()
            seconds["system"] -= sum(watcher.thread_cpu.values())  # the benchmark's watch
            agents = audit.count(mark)
            if phase.later:
                results.append(
                    {
                        "system": "gpuqueue",
                        "phase": phase.label,
                        "admitted": sum(n for _, n in admitted),
                        **out,
                        **requests(agents, GPUQUEUE_AGENT, 1),
                        "cpu_s": rounded(seconds),
                    }
                )
                results[-1]["cpu_s"]["submission"] = round(submit_cpu, 1)
                print_contended(results[-1])
                continue
            results.append(
                summary(
                    "gpuqueue",
                    phase.label,
                    len(phase.jobs),
                    sum(j.workers for j in phase.jobs),
                    len(watcher.bound),
                    max(watcher.bound.values(), default=float("nan")) - started,
                    submitted,
                    sum(n for _, n in admitted),
                    max((at for at, _ in admitted), default=0.0),
                    agents,
                    GPUQUEUE_AGENT,
                    seconds,
                )
            )
            results[-1]["cpu_s"]["submission"] = round(submit_cpu, 1)
            if steady is not None:
                results[-1]["steady_pass"] = steady
            print_summary(results[-1])
    finally:
        plane.stop()
    return results


def steady_passes(service: Service, step: Any, seconds: float) -> dict[str, float] | None:
    """The watcher's passes over `seconds` once every pod is bound and nothing changes (the
    cluster at rest, every job running): how many, and the CPU of each."""
    if seconds <= 0:
        return None
    first = len(service.pass_cpu)
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        step()
    each = [cpu * 1000 for cpu in service.pass_cpu[first:]]
    if not each:
        return None
    median, least = statistics.median(each), min(each)
    print(
        f"[gpuqueue] at rest: {len(each)} passes in {seconds:.0f} s, CPU each: median"
        f" {median:.1f} ms, least {least:.1f} ms"
    )
    return {"passes": len(each), "cpu_ms_median": round(median, 1), "cpu_ms_least": round(least, 1)}


def wait_bound(
    system: str,
    watcher: Watcher,
    phase: shapes.Phase,
    started: float,
    step: Any,
    timeout: float,
) -> None:
    """Drive (`step`) until every pod of the phase has been seen bound."""
    wanted = sum(j.workers for j in phase.jobs)
    reported = 0.0
    while True:
        now = time.perf_counter() - started
        with watcher.lock:
            bound = len(watcher.bound)
        if bound >= wanted:
            return
        if now > timeout:
            print(f"[{system} {phase.label}] timed out: {bound} of {wanted} bound", flush=True)
            return
        if now - reported >= 5:
            print(f"[{system} {phase.label}] {now:7.1f} s: {bound} bound", flush=True)
            reported = now
        step()


# Kueue -------------------------------------------------------------------------------------


def run_kueue(
    args: argparse.Namespace,
    tmp: Path,
    scenario: shapes.Scenario,
    quotas: list[kueue.TeamQuota],
) -> list[dict[str, Any]]:
    from kubernetes import client

    namespaces = sorted({q.namespace for q in quotas})
    audit = Audit(tmp / "audit")
    plane, admin = kube_scale.start_cluster(
        tmp, scenario.nodes, namespaces, apiserver_args=audit.apiserver_args()
    )
    admin.user_agent = BENCH_AGENT
    manager = None
    results = []
    try:
        core, batch = client.CoreV1Api(admin), client.BatchV1Api(admin)
        core.create_namespace({"metadata": {"name": "kueue-system"}})
        kueue.install_crds(admin)
        kueue.create_objects(admin, kueue.queue_objects(quotas, {"h100": kube_scale.H100}))
        manager = kueue.Manager(tmp / "manager", plane.kubeconfig, kueue.build()).start()
        wait_queues_active(admin, manager, len({q.team for q in quotas}))
        for i, phase in enumerate(scenario.phases):
            label = phase.label
            if i:
                empty_kueue(core, batch, admin, namespaces)
            pods_wanted = sum(j.workers for j in phase.jobs)
            groups = {"system": [manager.pid], **plane_groups(plane)}
            cpu = Cpu(groups).start()
            mark = audit.mark()
            watcher = Watcher(plane.kubeconfig, label, args.timeout, workloads=True)
            numbered = list(enumerate((*phase.jobs, *phase.later)))

            def create(item: tuple[int, shapes.JobShape], label: str = label) -> None:
                n, job = item
                batch.create_namespaced_job(
                    job.team,
                    kueue.job_manifest(
                        f"{label}-{n}",
                        job.team,
                        job.workers,
                        job.gpus,
                        {RUN_LABEL: label},
                        sim(job.seconds),
                        scenario.grace_seconds,
                    ),
                    _preload_content=False,
                )

            def create_all(items: list[tuple[int, shapes.JobShape]]) -> None:
                with ThreadPoolExecutor(max_workers=16) as pool:
                    list(pool.map(create, items))

            started = time.perf_counter()
            create_all(numbered[: len(phase.jobs)])
            submitted = time.perf_counter() - started
            print(
                f"[kueue {label}] {len(phase.jobs)} Jobs created in {submitted:.1f} s", flush=True
            )
            if phase.later:

                def alive() -> None:
                    if not manager.alive():
                        raise kueue.Unavailable(f"kueue exited:\n{manager.log_tail()}")
                    time.sleep(0.2)

                out = wait_contended(
                    "kueue",
                    watcher,
                    scenario,
                    phase,
                    started,
                    functools.partial(create_all, numbered[len(phase.jobs) :]),
                    alive,
                    args.timeout,
                )
                watcher.close()
                results.append(
                    {
                        "system": "kueue",
                        "phase": label,
                        "admitted": len(watcher.admitted),
                        **out,
                        **requests(audit.count(mark), KUEUE_AGENT, 1),
                        "cpu_s": rounded(cpu.stop()),
                    }
                )
                print_contended(results[-1])
                continue
            reported = 0.0
            while True:
                now = time.perf_counter() - started
                with watcher.lock:
                    bound, admitted = len(watcher.bound), len(watcher.admitted)
                if bound >= pods_wanted or now > args.timeout:
                    break
                if not manager.alive():
                    raise kueue.Unavailable(f"kueue exited:\n{manager.log_tail()}")
                if now - reported >= 5:
                    print(
                        f"[kueue {label}] {now:7.1f} s: {admitted} admitted, {bound} bound",
                        flush=True,
                    )
                    reported = now
                time.sleep(0.2)
            watcher.close()
            with watcher.lock:
                bound_times = list(watcher.bound.values())
                admit_times = list(watcher.admitted.values())
            wall = (max(bound_times) - started) if bound_times else float("nan")
            last = (max(admit_times) - started) if admit_times else 0.0
            seconds = cpu.stop()
            agents = audit.count(mark)
            results.append(
                summary(
                    "kueue",
                    label,
                    len(phase.jobs),
                    pods_wanted,
                    len(bound_times),
                    wall,
                    submitted,
                    len(admit_times),
                    last,
                    agents,
                    KUEUE_AGENT,
                    seconds,
                )
            )
            print_summary(results[-1])
    finally:
        if manager is not None:
            manager.stop()
        plane.stop()
    return results


def wait_queues_active(
    admin: Any, manager: kueue.Manager, teams: int, timeout: float = 180
) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(admin)
    deadline = time.monotonic() + timeout
    while True:
        if not manager.alive():
            raise kueue.Unavailable(f"kueue exited:\n{manager.log_tail()}")
        listed = custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues")
        active = [
            q
            for q in listed["items"]
            for c in (q.get("status") or {}).get("conditions") or []
            if c["type"] == "Active" and c["status"] == "True"
        ]
        if len(active) >= teams:
            return
        if time.monotonic() > deadline:
            raise kueue.Unavailable(
                f"ClusterQueues not active in {timeout:.0f} s:\n{manager.log_tail()}"
            )
        time.sleep(0.5)


def empty_kueue(core: Any, batch: Any, admin: Any, namespaces: list[str]) -> None:
    """Delete the Jobs and their pods; wait until no pod and no Workload is left (not timed)."""
    from kubernetes import client

    for namespace in namespaces:
        kube_scale.delete_each(
            batch.list_namespaced_job,
            batch.delete_namespaced_job,
            namespace,
            RUN_LABEL,
            {"propagation_policy": "Background", "grace_period_seconds": 0},
        )
        kube_scale.delete_each(
            core.list_namespaced_pod,
            core.delete_namespaced_pod,
            namespace,
            RUN_LABEL,
            {"grace_period_seconds": 0},
        )
    custom = client.CustomObjectsApi(admin)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        pods = json.loads(
            core.list_pod_for_all_namespaces(
                label_selector=RUN_LABEL, limit=1, _preload_content=False
            ).data
        )
        workloads = custom.list_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "workloads", limit=1
        )
        if not pods["items"] and not workloads["items"]:
            return
        time.sleep(1)
    raise RuntimeError("pods or Workloads still there after 300 s")


# Report ------------------------------------------------------------------------------------


def summary(
    system: str,
    label: str,
    jobs: int,
    pods: int,
    bound: int,
    wall: float,
    submit: float,
    admitted: int,
    last_admission: float,
    agents: dict[str, Counter[str]],
    own_agent: str,
    cpu: dict[str, float],
) -> dict[str, Any]:
    own = sum(agents.get(own_agent, Counter()).values())
    every = sum(sum(c.values()) for c in agents.values())
    bench = sum(agents.get(BENCH_AGENT, Counter()).values())
    return {
        "system": system,
        "phase": label,
        "jobs": jobs,
        "pods": pods,
        "bound": bound,
        "all_bound_s": round(wall, 2),
        "submit_s": round(submit, 2),
        "admitted": admitted,
        "last_admission_s": round(last_admission, 2),
        "admissions_per_s": round(admitted / last_admission, 1) if last_admission else None,
        "requests_own": own,
        "requests_own_per_pod": round(own / max(bound, 1), 2),
        "requests_every_client_but_bench": every - bench,
        "requests_by_agent": {a: dict(c) for a, c in sorted(agents.items())},
        "cpu_s": {k: round(v, 1) for k, v in cpu.items()},
    }


def print_summary(r: dict[str, Any]) -> None:
    print(
        f"[{r['system']} {r['phase']}] {r['bound']}/{r['pods']} bound in {r['all_bound_s']} s; "
        f"{r['admitted']} admitted by {r['last_admission_s']} s; "
        f"{r['requests_own']} own requests; CPU {r['cpu_s']}",
        flush=True,
    )


def table(results: list[dict[str, Any]]) -> str:
    """Per phase: gpuqueue, Kueue, the ratio and its target."""
    rows = [
        "| phase | measure | gpuqueue | Kueue | gpuqueue / Kueue | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    by = {(r["system"], r["phase"]): r for r in results}
    for phase in dict.fromkeys(r["phase"] for r in results if "all_bound_s" in r):
        g, k = by.get(("gpuqueue", phase)), by.get(("kueue", phase))
        if not g and not k:
            continue

        def cell(r: dict[str, Any] | None, f: Any) -> str:
            return "—" if r is None else f(r)

        measures = [
            ("pods bound", lambda r: f"{r['bound']} of {r['pods']}", None, ""),
            (
                "all pods bound",
                lambda r: f"{r['all_bound_s']:.1f} s",
                lambda r: r["all_bound_s"],
                "≤ 0.5",
            ),
            ("admissions per second", lambda r: f"{r['admissions_per_s'] or 0:.0f}", None, ""),
            (
                "its own API requests per pod",
                lambda r: f"{r['requests_own_per_pod']:.2f}",
                lambda r: r["requests_own_per_pod"],
                "< 1",
            ),
            (
                "API requests, every client but the benchmark",
                lambda r: f"{r['requests_every_client_but_bench']:,}",
                None,
                "",
            ),
            (
                "its own CPU",
                lambda r: f"{r['cpu_s']['system']:.1f} s",
                lambda r: r["cpu_s"]["system"],
                "< 1",
            ),
            (
                "kube-apiserver + etcd CPU",
                lambda r: f"{r['cpu_s']['kube-apiserver + etcd']:.1f} s",
                None,
                "",
            ),
        ]
        for name, fmt, value, target in measures:
            ratio = ""
            if value and g and k and value(k):
                ratio = f"{value(g) / value(k):.2f}"
            rows.append(
                f"| {phase} | {name} | {cell(g, fmt)} | {cell(k, fmt)} | {ratio} | {target} |"
            )
    return "\n".join(rows)


def requests(agents: dict[str, Counter[str]], own_agent: str, pods: int) -> dict[str, Any]:
    own = agents.get(own_agent, Counter())
    every = sum(sum(c.values()) for a, c in agents.items() if a != BENCH_AGENT)
    return {
        "requests_own": sum(own.values()),
        "requests_own_by_verb": dict(own.most_common()),
        "requests_every_client_but_bench": every,
        "requests_by_agent": {a: dict(c) for a, c in sorted(agents.items())},
    }


def rounded(cpu: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 1) for k, v in cpu.items()}


def print_contended(r: dict[str, Any]) -> None:
    def s(v: float | None) -> str:
        return "—" if v is None else f"{v:.1f} s"

    print(
        f"[{r['system']} {r['phase']}] every GPU held at {s(r['full_s'])}; the later team waited "
        f"{s(r['waited_s'])}; {r['preempted_pods']} pods preempted; "
        f"{r['requests_own']} own requests {r['requests_own_by_verb']}; CPU {r['cpu_s']}",
        flush=True,
    )


def contended_table(results: list[dict[str, Any]], every: float = 1.0) -> str:
    """The contended mix: per system its times, then each team's GPUs every `every` s."""
    rows = [
        "| measure | " + " | ".join(r["system"] for r in results) + " |",
        "| --- |" + " --- |" * len(results),
    ]

    def line(name: str, f: Any) -> None:
        rows.append(f"| {name} | " + " | ".join(f(r) for r in results) + " |")

    def s(v: float | None) -> str:
        return "—" if v is None else f"{v:.1f} s"

    line("every GPU held (first wave)", lambda r: s(r["full_s"]))
    line("team under its guarantee: waited for it", lambda r: s(r["waited_s"]))
    line("pods preempted", lambda r: str(r["preempted_pods"]))
    line("own API requests", lambda r: f"{r['requests_own']:,}")
    line("own CPU", lambda r: f"{r['cpu_s']['system']:.1f} s")
    line("kube-apiserver + etcd CPU", lambda r: f"{r['cpu_s']['kube-apiserver + etcd']:.1f} s")
    out = "\n".join(rows)
    for r in results:
        out += f"\n\n{r['system']}: GPUs held per team (t from the first submission)\n"
        for sample in r["shares"]:
            if sample["t"] % every < 1e-6:
                out += f"  {sample}\n"
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scenario", choices=("kai", "baseline", "contended"), default="kai")
    parser.add_argument("--nodes", type=int, help="kai: 500; baseline: 75; contended: 16")
    parser.add_argument("--jobs", type=int, default=4000, help="kai: one-GPU jobs")
    parser.add_argument("--gangs", type=int, default=50, help="kai: gangs of 8 workers × 8 GPUs")
    parser.add_argument("--teams", type=int, default=4, help="kai: teams")
    parser.add_argument("--scale", type=int, default=10, help="baseline: counts divided by it")
    parser.add_argument("--grace", type=int, default=5, help="contended: grace seconds")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per phase")
    parser.add_argument("--systems", default="gpuqueue,kueue", help="run in this order")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "--steady", type=float, default=0, help="gpuqueue: seconds of passes at rest, measured"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop what was started
    systems = [s for s in args.systems.split(",") if s]
    if args.scenario == "kai":
        scenario = shapes.kai(args.nodes or 500, args.jobs, args.gangs, args.teams)
    elif args.scenario == "baseline":
        scenario = shapes.baseline(args.scale)
    else:
        scenario = shapes.contended(args.nodes or 16, args.grace)
        # Kueue preempts a workload however long it has run: so does gpuqueue here (its
        # defaults spare a job its first minute, and one above its guarantee its first 4 h).
        os.environ["GPUQUEUE_MIN_RUNTIME_SECONDS"] = "0"
        os.environ["GPUQUEUE_RECLAIM_MIN_RUNTIME_SECONDS"] = "0"

    print(f"cores {os.cpu_count()}; scenario {scenario.name}: {scenario.nodes} nodes × 8 GPUs")
    binary = kueue.build() if "kueue" in systems else None
    tmp = Path(tempfile.mkdtemp(prefix="gq-peers-"))
    tmp.chmod(0o755)  # the embedded PostgreSQL runs as another user when we are root
    servers: list[Any] = []
    results: list[dict[str, Any]] = []
    try:
        servers = kube_scale.start_services(tmp)
        from gpuqueue.models import Quota

        world = build_teams(scenario.teams)
        quotas = kueue.quotas_of(Quota.objects.select_related("team", "flavor").order_by("id"))
        for system in systems:
            before = kube_scale.calibration() * 1000
            print(f"calibration before {system}: {before:.1f} ms", flush=True)
            if system == "gpuqueue":
                ran = run_gpuqueue(args, tmp / "gpuqueue", scenario, world)
            else:
                assert binary is not None
                ran = run_kueue(args, tmp / "kueue", scenario, quotas)
            calibrated(ran, before)
            results += ran
    finally:
        for server in servers:
            server.stop()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    calibrations = {r["system"]: r.get("calibration_ms") for r in results}
    print(
        f"{scenario.name}: {scenario.nodes} nodes × 8 GPUs; sum(range(10**6)) before/after "
        f"each system (ms): {calibrations}"
    )
    contended = [r for r in results if "full_s" in r]
    if contended:
        print(contended_table(contended))
    else:
        print(table(results))
    document = {
        "scenario": scenario.name,
        "shape": {"nodes": scenario.nodes, "teams": [t.__dict__ for t in scenario.teams]},
        "kueue": kueue.KUEUE_VERSION,
        "results": results,
    }
    print(json.dumps(document, indent=1, default=str)[:20000])
    if args.json:
        args.json.write_text(json.dumps(document, indent=1, default=str))
    if contended:
        return 0 if all(r["waited_s"] is not None for r in contended) else 1
    return 0 if all(r["bound"] >= r["pods"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
