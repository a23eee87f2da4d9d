"""gpuqueue and Kueue side by side on the same real control plane. Prints numbers; not a test.

    .venv/bin/python -m benchmarks.peers.side_by_side            # 500 nodes, 4,000 jobs, 50 gangs
    .venv/bin/python -m benchmarks.peers.side_by_side --nodes 100 --jobs 800 --gangs 10

For each system, one at a time, on a fresh control plane of tests/kube/controlplane.py (started
by benchmarks/kube_scale.py's `start_cluster`, its kube-apiserver writing an audit log) with the
same kwok nodes (--nodes × 8 H100) and team namespaces:

- gpuqueue: the teams and quotas of kube_scale's `build_world` (guarantees add up to the
  cluster, every limit is the whole cluster, weight 1), then kube_scale's `run_phase`: jobs
  through `submit_job`, admission cycles and cluster syncs as the service runs them.
- Kueue (benchmarks/peers/kueue.py): its CRDs from its module, the same quotas as ClusterQueues
  of one cohort (`queue_objects` of the Quota rows), a LocalQueue per team namespace, its
  controller manager as a local process; the benchmark creates batch/v1 Jobs already suspended
  with the queue label (a gang: one Job, parallelism = completions = workers), 16 at once.

Phase "single": --jobs one-GPU jobs round robin over the teams; the cluster is emptied (not
timed); phase "gangs": --gangs jobs of 8 workers × 8 GPUs. Every pod runs 10 simulated hours.
Per phase and system: seconds from the first submission until every pod is bound; admissions
per second (admitted jobs over the time of the last admission: gpuqueue's cycle persisted it,
Kueue's Workload is Admitted); the apiserver requests of the system's own client and of every
client (from the audit log, by user agent); CPU seconds of the system (gpuqueue: this process,
which submits, plans and launches, plus PostgreSQL and Redis; Kueue: its manager process) and of
kube-apiserver and etcd.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
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
from benchmarks.peers import kueue  # noqa: E402

BENCH_AGENT = "peers-bench"  # the benchmark's own clients (driving Kueue, reading, emptying)
GPUQUEUE_AGENT = "gpuqueue"
KUEUE_AGENT = "kueue"
RUN_LABEL = "peers-run"
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


# gpuqueue ----------------------------------------------------------------------------------


def run_gpuqueue(args: argparse.Namespace, tmp: Path, world: Any) -> list[dict[str, Any]]:
    from kubernetes import client

    flavor, user, teams, namespaces = world
    audit = Audit(tmp / "audit")
    plane, admin = kube_scale.start_cluster(
        tmp, args.nodes, namespaces, apiserver_args=audit.apiserver_args()
    )
    admin.user_agent = BENCH_AGENT
    results = []
    try:
        core, batch = client.CoreV1Api(admin), client.BatchV1Api(admin)
        phases = [("single", args.jobs, 1, 1), ("gangs", args.gangs, 8, 8)]
        for i, (label, count, workers, gpus) in enumerate(p for p in phases if p[1]):
            if i:
                kube_scale.empty_cluster(core, batch, namespaces)
            backend = kube_scale.make_backend(plane.kubeconfig, namespaces)
            backend.api_client.user_agent = GPUQUEUE_AGENT
            kube_scale.take_inventory(backend, args.nodes)
            pids = services_pids({p.pid for p in plane.processes.values()})
            cpu = Cpu({"system": pids, **plane_groups(plane)}).start()
            mark = audit.mark()
            phase = kube_scale.run_phase(
                label, backend, admin, user, flavor, teams, count, workers, gpus, args.timeout
            )
            seconds = cpu.stop()
            agents = audit.count(mark)
            admitted, last = 0, 0.0
            for at, n, laps in phase["cycles"]:
                if n:
                    admitted += n
                    last = at + sum(v for k, v in laps.items() if k <= "4_persist")
            results.append(
                summary(
                    "gpuqueue",
                    phase["label"],
                    count,
                    phase["pods"],
                    phase["bound"],
                    phase["wall_s"],
                    phase["submit_s"],
                    admitted,
                    last,
                    agents,
                    GPUQUEUE_AGENT,
                    seconds,
                )
            )
            print_summary(results[-1])
    finally:
        plane.stop()
    return results


# Kueue -------------------------------------------------------------------------------------


class Watcher:
    """Raw watches of the run's pods (when each is first seen bound) and of Workloads (when
    each is first seen Admitted), each in a thread of its own."""

    def __init__(self, kubeconfig: Path, label: str, timeout: float) -> None:
        from kubernetes import client

        from tests.kube.controlplane import api_client_for

        self.lock = threading.Lock()
        self.bound: dict[str, float] = {}
        self.admitted: dict[str, float] = {}
        self.responses: list[Any] = []
        self.closed = False
        seconds = int(timeout) + 120
        api = api_client_for(kubeconfig)
        api.user_agent = BENCH_AGENT
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        pods = core.list_pod_for_all_namespaces(
            label_selector=f"{RUN_LABEL}={label}",
            watch=True,
            timeout_seconds=seconds,
            _preload_content=False,
        )
        workloads = custom.list_cluster_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            "workloads",
            watch=True,
            timeout_seconds=seconds,
            _preload_content=False,
        )
        self.responses = [pods, workloads]
        for response, seen in ((pods, self._pod), (workloads, self._workload)):
            threading.Thread(target=self._follow, args=(response, seen), daemon=True).start()

    def _follow(self, response: Any, seen: Any) -> None:
        buffer = b""
        try:
            for chunk in response.stream(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    event = json.loads(line) if line.strip() else {}
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        seen(event["object"], time.perf_counter())
        except Exception as exc:  # noqa: BLE001 - shut at the end of the phase
            if not self.closed:
                print(f"watch ended: {exc!r}", flush=True)

    def _pod(self, pod: dict[str, Any], at: float) -> None:
        if (pod.get("spec") or {}).get("nodeName"):
            with self.lock:
                self.bound.setdefault(pod["metadata"]["uid"], at)

    def _workload(self, workload: dict[str, Any], at: float) -> None:
        conditions = (workload.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conditions):
            with self.lock:
                self.admitted.setdefault(workload["metadata"]["uid"], at)

    def close(self) -> None:
        """Shut the sockets under the readers (closing the responses would wait for them)."""
        self.closed = True
        for response in self.responses:
            with contextlib.suppress(Exception):
                response.shutdown()


def run_kueue(
    args: argparse.Namespace, tmp: Path, quotas: list[kueue.TeamQuota], namespaces: list[str]
) -> list[dict[str, Any]]:
    from kubernetes import client

    audit = Audit(tmp / "audit")
    plane, admin = kube_scale.start_cluster(
        tmp, args.nodes, namespaces, apiserver_args=audit.apiserver_args()
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
        phases = [("single", args.jobs, 1, 1), ("gangs", args.gangs, 8, 8)]
        for i, (label, count, workers, gpus) in enumerate(p for p in phases if p[1]):
            if i:
                empty_kueue(core, batch, admin, namespaces)
            pods_wanted = count * workers
            groups = {"system": [manager.pid], **plane_groups(plane)}
            cpu = Cpu(groups).start()
            mark = audit.mark()
            watcher = Watcher(plane.kubeconfig, label, args.timeout)
            started = time.perf_counter()

            def create(
                n: int, label: str = label, workers: int = workers, gpus: int = gpus
            ) -> None:
                batch.create_namespaced_job(
                    namespaces[n % len(namespaces)],
                    kueue.job_manifest(
                        f"{label}-{n}",
                        namespaces[n % len(namespaces)],
                        workers,
                        gpus,
                        {RUN_LABEL: label},
                        kube_scale.SIM,
                    ),
                    _preload_content=False,
                )

            with ThreadPoolExecutor(max_workers=16) as pool:
                list(pool.map(create, range(count)))
            submitted = time.perf_counter() - started
            print(f"[kueue {label}] {count} Jobs created in {submitted:.1f} s", flush=True)
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
                    count,
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
    for phase in ("single", "gangs"):
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=4000, help="one-GPU jobs")
    parser.add_argument("--gangs", type=int, default=50, help="gangs of 8 workers × 8 GPUs")
    parser.add_argument("--teams", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per phase")
    parser.add_argument("--systems", default="gpuqueue,kueue")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop what was started
    systems = [s for s in args.systems.split(",") if s]

    calibration = kube_scale.calibration() * 1000
    print(
        f"calibration: sum(range(10**6)) best of 5 = {calibration:.1f} ms; cores {os.cpu_count()}"
    )
    binary = kueue.build() if "kueue" in systems else None
    tmp = Path(tempfile.mkdtemp(prefix="gq-peers-"))
    tmp.chmod(0o755)  # the embedded PostgreSQL runs as another user when we are root
    servers: list[Any] = []
    results: list[dict[str, Any]] = []
    try:
        servers = kube_scale.start_services(tmp)
        from gpuqueue.models import Quota

        namespaces = [f"team-{i}" for i in range(args.teams)]
        flavor, user, teams = kube_scale.build_world(
            args.teams, args.nodes * kube_scale.GPUS_PER_NODE
        )
        quotas = kueue.quotas_of(Quota.objects.select_related("team", "flavor").order_by("id"))
        if "gpuqueue" in systems:
            results += run_gpuqueue(args, tmp / "gpuqueue", (flavor, user, teams, namespaces))
        if "kueue" in systems:
            assert binary is not None
            results += run_kueue(args, tmp / "kueue", quotas, namespaces)
    finally:
        for server in servers:
            server.stop()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(
        f"{args.nodes} nodes × 8 GPUs, {args.jobs} one-GPU jobs, {args.gangs} gangs of 8 × 8; "
        f"sum(range(10**6)) {calibration:.1f} ms"
    )
    print(table(results))
    document = {
        "calibration_ms": round(calibration, 1),
        "shape": {"nodes": args.nodes, "jobs": args.jobs, "gangs": args.gangs, "teams": args.teams},
        "kueue": kueue.KUEUE_VERSION,
        "results": results,
    }
    print(json.dumps(document, indent=1))
    if args.json:
        args.json.write_text(json.dumps(document, indent=1))
    return 0 if all(r["bound"] >= r["pods"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
