"""Scale benchmark on a real Kubernetes control plane. Prints numbers; not a test.

    .venv/bin/python benchmarks/kube_scale.py          # 500 nodes, 4,000 jobs, 50 gangs
    .venv/bin/python benchmarks/kube_scale.py --nodes 50 --jobs 400 --gangs 5

The scenario of KAI Scheduler's nightly scale test, through gpuqueue's own code path:

1. Start PostgreSQL and Redis from their wheels in a temporary folder, set up Django, migrate.
2. Start the control plane of tests/kube/controlplane.py (etcd, kube-apiserver,
   kube-controller-manager, kube-scheduler, kwok) with --nodes kwok nodes of 8 H100 each; one
   namespace per team (--teams), each with its `default` ServiceAccount.
3. The flavor h100 and the teams' quotas: guarantees add up to the cluster, every limit is the
   whole cluster. One user, a member of every team. One sync takes the node inventory in.
4. Phase "single": submit --jobs one-GPU jobs through `submit_job` (round robin over the
   teams, each running 10 simulated hours so that none finishes), then loop as the service
   does: an admission cycle (`run_cycle`) whenever jobs are pending, then a cluster sync
   (`sync_cluster`: observe, release each gang's gated pods to its planned nodes), until
   every pod of every job is bound (spec.nodeName set, as read by the sync's own pod LIST).
   The clock runs from the first submission.
5. Empty the cluster (Jobs, pods, Services, Secrets deleted; the jobs marked cancelled).
6. Phase "gangs": the same with --gangs gangs of 8 workers × 8 GPUs.

The backend lists nodes, pods and Jobs on every sync (no watcher); every API request it makes
is counted by verb. The apiserver's own `apiserver_request_total` is read before and after each
phase: it also counts kube-scheduler, the Job controller and kwok. Anchor: KAI Scheduler's
nightly test on 500 kwok nodes placed 4,000 single-GPU jobs in 13 min 58 s (25 min 56 s when
the scheduler ran while the jobs were being created).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
SIM = {"gpuqueue.dev/sim-duration-seconds": "36000"}
GPUS_PER_NODE = 8
KAI = {"single": "13 min 58 s (25 min 56 s with the scheduler running during creation)"}


def calibration() -> float:
    """Seconds for sum(range(10**6)), best of 5: how fast this machine runs Python."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        sum(range(10**6))
        best = min(best, time.perf_counter() - started)
    return best


def start_services(tmp: Path) -> list[Any]:
    """Step 1: PostgreSQL and Redis in `tmp`, Django configured and migrated."""
    from gpuqueue.ops.embedded import start_postgres, start_redis

    os.environ["GPUQUEUE_DATA_DIR"] = str(tmp / "data")
    (tmp / "data" / "staticfiles").mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SECRET_KEY", "benchmark-only")
    os.environ["GPUQUEUE_DEMO"] = "0"
    os.environ.setdefault("GPUQUEUE_LOG_LEVEL", "WARNING")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuqueue.settings")
    servers: list[Any] = []
    if "DATABASE_URL" not in os.environ:
        pg = start_postgres(tmp / "pg")
        servers.append(pg)
        os.environ["DATABASE_URL"] = pg.url
    if "REDIS_URL" not in os.environ:
        redis = start_redis(tmp / "redis")
        servers.append(redis)
        os.environ["REDIS_URL"] = redis.url
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return servers


# Counting ----------------------------------------------------------------------------------


class Requests:
    """Every request an ApiClient makes, by verb (LIST is a GET on a collection)."""

    def __init__(self, api_client: Any) -> None:
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        call_api = api_client.call_api

        def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            verb = {"POST": "CREATE", "PUT": "UPDATE"}.get(method, method)
            if method == "GET":
                verb = "LIST" if is_collection(url) else "GET"
            with self.lock:
                self.counts[verb] += 1
            return call_api(method, url, *args, **kwargs)

        api_client.call_api = counted

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.counts)


def is_collection(url: str) -> bool:
    """/api/v1/pods, /apis/batch/v1/namespaces/x/jobs: a collection; …/jobs/name: one object."""
    path = urllib.parse.urlsplit(url).path.strip("/").split("/")
    rest = path[2:] if path[0] == "api" else path[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return len(rest) % 2 == 1


def apiserver_requests(api: Any) -> Counter[str]:
    """`apiserver_request_total` by verb, as the apiserver counts them (every client)."""
    method, url, headers, _, _ = api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers)
    totals: Counter[str] = Counter()
    for line in response.read().decode().splitlines():
        if line.startswith("apiserver_request_total{"):
            labels, value = line.rsplit(" ", 1)
            verb = re.search(r'verb="([^"]*)"', labels)
            totals[verb.group(1) if verb else "?"] += int(float(value))
    return totals


def make_backend(kubeconfig: Path, namespaces: list[str]) -> Any:
    """gpuqueue's KubernetesBackend as its processes make one, timing what it does."""
    from gpuqueue.cluster.k8s_calls import Caller
    from gpuqueue.cluster.kubernetes import KubernetesBackend
    from gpuqueue.cluster.manifests import ClusterOptions, attempt_of
    from tests.kube.controlplane import api_client_for

    class TimedBackend(KubernetesBackend):
        """Accumulates seconds per backend operation; keeps the pods the last sync listed."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.seconds: Counter[str] = Counter()
            self.calls: Counter[str] = Counter()
            self.listed_pods: list[dict[str, Any]] = []
            self.listed_at = 0.0

        def _timed(self, what: str, fn: Any, *args: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.seconds[what] += time.perf_counter() - started
                self.calls[what] += 1

        def list_raw_nodes(self) -> Any:
            return self._timed("list nodes", super().list_raw_nodes)

        def list_raw_pods(self) -> Any:
            listed = self._timed("list pods", super().list_raw_pods)
            self.listed_pods = [p for p in listed["items"] if attempt_of(p) is not None]
            self.listed_at = time.perf_counter()
            return listed

        def list_raw_jobs(self, namespace: str) -> Any:
            return self._timed("list jobs", super().list_raw_jobs, namespace)

        def observe(self) -> Any:
            return self._timed("observe", super().observe)

        def launch(self, spec: Any) -> Any:  # the Launched uids the cycle records
            return self._timed("launch", super().launch, spec)

        def release_gangs(self) -> int:
            return int(self._timed("release gangs", super().release_gangs))

    api_client = api_client_for(kubeconfig)
    backend = TimedBackend(
        api_client,
        options=ClusterOptions(public_url="http://gpuqueue.bench"),
        caller=Caller(attempts=3, backoff_seconds=0.1),
        namespaces=lambda: namespaces,
        node_lost_grace_seconds=300,
    )
    backend.requests = Requests(api_client)
    return backend


# The world ---------------------------------------------------------------------------------


def start_cluster(
    tmp: Path, nodes: int, namespaces: list[str], apiserver_args: tuple[str, ...] = ()
) -> tuple[Any, Any]:
    """Step 2: the control plane (kube-apiserver given `apiserver_args` besides its own), its
    nodes, the team namespaces and their service accounts."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from tests.kube.controlplane import (
        ControlPlane,
        api_client_for,
        build,
        create_nodes,
        fake_node,
        wait_nodes_ready,
    )

    plane = ControlPlane(tmp / "kube", build(), apiserver_args=apiserver_args)
    plane.start()
    api = api_client_for(plane.kubeconfig)
    manifests = [
        fake_node(f"h100-{i}", {"nvidia.com/gpu": GPUS_PER_NODE}, labels=H100) for i in range(nodes)
    ]
    create_nodes(api, manifests)
    wait_nodes_ready(api, [n["metadata"]["name"] for n in manifests], timeout=300)
    core = client.CoreV1Api(api)
    for namespace in namespaces:
        core.create_namespace({"metadata": {"name": namespace}})
    for namespace in namespaces:
        for _ in range(600):
            try:
                core.read_namespaced_service_account("default", namespace)
                break
            except ApiException:
                time.sleep(0.1)
    return plane, api


def build_world(teams: int, gpus: int) -> tuple[Any, Any, list[Any]]:
    """Step 3: flavor, teams with quotas (guarantees add up to the cluster), one member."""
    from django.contrib.auth import get_user_model

    from gpuqueue.models import Flavor, Quota
    from teams.models import Membership, Role, Team

    flavor = Flavor.objects.create(
        name="h100", resource_name="nvidia.com/gpu", node_selector=dict(H100)
    )
    user = get_user_model().objects.create_user("bench", password="bench-pass-1")
    team_rows = []
    for i in range(teams):
        slug = f"team-{i}"
        team = Team.objects.create(slug=slug, name=slug, namespace=slug)
        share = gpus // teams + (1 if i < gpus % teams else 0)
        Quota.objects.create(team=team, flavor=flavor, guarantee=share, limit=gpus, weight=1)
        Membership.objects.create(user=user, team=team, role=Role.MEMBER)
        team_rows.append(team)
    return flavor, user, team_rows


def take_inventory(backend: Any, nodes: int) -> None:
    """Sync until every node is in the inventory, ready and untainted (the node lifecycle
    controller takes its `not-ready` taint off a new node a moment after kwok reports it
    Ready), as the watcher's first passes would before any job is submitted."""
    from gpuqueue.cycle.cluster_sync import sync_cluster
    from gpuqueue.models import Node

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        sync_cluster(backend)
        if Node.objects.filter(ready=True, cordoned=False, taints=[]).count() >= nodes:
            return
        time.sleep(0.5)
    raise RuntimeError("the inventory did not show every node usable within 120 s")


# One phase ---------------------------------------------------------------------------------


def run_phase(
    label: str,
    backend: Any,
    admin: Any,
    user: Any,
    flavor: Any,
    teams: list[Any],
    count: int,
    workers: int,
    gpus_per_worker: int,
    timeout: float,
    shapes: list[tuple[Any, int, int, dict[str, str]]] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Submit `count` jobs, cycle and sync until every pod is bound; returns the figures.
    `shapes`: instead, one job per (team, workers, GPUs per worker, annotations); `extra`: more
    fields of every job (labels, checkpoint grace)."""
    from gpuqueue.core.states import JobState
    from gpuqueue.cycle.cluster_sync import sync_cluster
    from gpuqueue.cycle.run import run_cycle
    from gpuqueue.models import Job
    from gpuqueue.services.jobs.submit import submit_job

    if shapes is None:
        shapes = [(teams[i % len(teams)], workers, gpus_per_worker, SIM) for i in range(count)]
    count = len(shapes)
    pods_wanted = sum(shape[1] for shape in shapes)
    before_server = apiserver_requests(admin)
    before_ours = backend.requests.snapshot()
    backend.seconds.clear()
    backend.calls.clear()
    fields = {"name": label, "image": "ghcr.io/acme/train:1", **(extra or {})}
    started = time.perf_counter()
    for team, shape_workers, gpus, notes in shapes:
        shaped = {"workers": shape_workers, "gpus_per_worker": gpus, "annotations": notes}
        submit_job(user, team, flavor, {**fields, **shaped})
    submitted = time.perf_counter() - started
    print(f"[{label}] {count} submitted in {submitted:.1f} s", flush=True)
    cycles: list[tuple[float, int, dict[str, float]]] = []  # (at, admitted, phases)
    syncs: list[tuple[float, float, int]] = []  # (at, seconds, pods released)
    first_bound: float | None = None
    bound = 0
    while True:
        now = time.perf_counter() - started
        if now > timeout:
            print(f"[{label}] timed out after {now:.0f} s with {bound} of {pods_wanted} bound")
            break
        if Job.objects.filter(state=JobState.PENDING).exists():
            result = run_cycle(backend=backend)
            cycles.append((now, len(result.admitted), dict(result.phase_seconds)))
            print(
                f"[{label}] {now:7.1f} s cycle: {len(result.admitted)} admitted, "
                f"{result.pending} pending, {result.phase_seconds}",
                flush=True,
            )
        sync_started = time.perf_counter()
        result = sync_cluster(backend)
        took = time.perf_counter() - sync_started
        at = backend.listed_at - started
        bound = sum(1 for p in backend.listed_pods if (p.get("spec") or {}).get("nodeName"))
        if bound and first_bound is None:
            first_bound = at
        syncs.append((sync_started - started, took, result.released))
        print(
            f"[{label}] {sync_started - started:7.1f} s sync {took:5.2f} s: "
            f"{len(backend.listed_pods)} pods, {bound} bound, {result.released} released, "
            f"{result.transitions} transitions",
            flush=True,
        )
        if bound >= pods_wanted:
            break
        if not result.released and took < 1:
            time.sleep(0.2)  # waiting on the Job controller or kube-scheduler
    wall = backend.listed_at - started
    after_server = apiserver_requests(admin)
    ours = backend.requests.snapshot() - before_ours
    server = after_server - before_server
    return {
        "label": label,
        "jobs": count,
        "pods": pods_wanted,
        "bound": bound,
        "submit_s": submitted,
        "first_bound_s": first_bound,
        "wall_s": wall,
        "cycles": cycles,
        "syncs": syncs,
        "ours": ours,
        "server": server,
        "backend_seconds": dict(backend.seconds),
        "backend_calls": dict(backend.calls),
    }


def empty_cluster(core: Any, batch: Any, namespaces: list[str]) -> None:
    """Step 5: delete every workload and mark the jobs cancelled (setup, not measured).

    Object by object, 16 requests at once, from lists read in pages: one deletecollection of
    1,000 Jobs outran the API server's request timeout (60 s) on a loaded machine and ended the
    run before its gang phase. Pods go with grace 0 (kwok keeps a deleted pod its grace period).
    """
    from gpuqueue.cluster.manifests import SELECTOR
    from gpuqueue.core.states import JobState
    from gpuqueue.models import Job

    Job.objects.exclude(state__in=[JobState.SUCCEEDED, JobState.FAILED]).update(
        state=JobState.CANCELLED
    )
    for namespace in namespaces:
        for lister, deleter, options in (
            (
                batch.list_namespaced_job,
                batch.delete_namespaced_job,
                {"propagation_policy": "Background", "grace_period_seconds": 0},
            ),
            (core.list_namespaced_pod, core.delete_namespaced_pod, {"grace_period_seconds": 0}),
            (core.list_namespaced_service, core.delete_namespaced_service, {}),
            (core.list_namespaced_secret, core.delete_namespaced_secret, {}),
        ):
            delete_each(lister, deleter, namespace, SELECTOR, options)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        listed = json.loads(core.list_pod_for_all_namespaces(limit=1, _preload_content=False).data)
        if not listed["items"]:
            return
        time.sleep(1)
    raise RuntimeError("pods still there after 300 s")


def delete_each(
    lister: Any, deleter: Any, namespace: str, selector: str, options: dict[str, Any]
) -> int:
    """Delete every object `selector` matches in `namespace`; returns how many."""
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes.client.exceptions import ApiException

    names: list[str] = []
    token = None
    while True:
        page = json.loads(
            lister(
                namespace,
                label_selector=selector,
                limit=500,
                _continue=token,
                _preload_content=False,
                _request_timeout=60,
            ).data
        )
        names += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break

    def delete(name: str) -> None:
        try:
            deleter(name, namespace, _preload_content=False, _request_timeout=30, **options)
        except ApiException as exc:
            if exc.status != 404:  # already gone (a Job's pods go with it)
                raise

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(delete, names))
    return len(names)


# Report ------------------------------------------------------------------------------------


def report(phase: dict[str, Any]) -> None:
    wall = phase["wall_s"]
    print(f"\n== {phase['label']}: {phase['jobs']} jobs, {phase['pods']} pods ==")
    rows = [
        ("pods bound", f"{phase['bound']} of {phase['pods']}"),
        ("submission (submit_job)", f"{phase['submit_s']:.1f} s"),
        ("first pod bound", f"{phase['first_bound_s'] or 0:.1f} s"),
        ("all pods bound (from first submission)", f"{wall:.1f} s ({wall / 60:.1f} min)"),
        ("admission cycles", str(len(phase["cycles"]))),
        ("cluster syncs", str(len(phase["syncs"]))),
    ]
    for at, admitted, phases in phase["cycles"]:
        if admitted:
            detail = ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
            rows.append((f"  cycle at {at:.1f} s: {admitted} admitted", detail + " s"))
    sync_times = sorted(took for _, took, _ in phase["syncs"])
    if sync_times:
        rows.append(
            (
                "  sync pass time (min / median / max)",
                f"{sync_times[0]:.2f} / {sync_times[len(sync_times) // 2]:.2f} / "
                f"{sync_times[-1]:.2f} s",
            )
        )
    for what, seconds in sorted(phase["backend_seconds"].items()):
        rows.append((f"  backend {what} ({phase['backend_calls'][what]}×)", f"{seconds:.1f} s"))
    ours, server = phase["ours"], phase["server"]
    total = sum(ours.values())
    rows.append(("gpuqueue API requests", f"{total} ({total / wall:.0f}/s): " + _verbs(ours)))
    total = sum(server.values())
    rows.append(
        ("apiserver requests, every client", f"{total} ({total / wall:.0f}/s): " + _verbs(server))
    )
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    if phase["label"] in KAI:
        print(f"{'KAI Scheduler, same scenario':<{width}}  {KAI[phase['label']]}")


def _verbs(counts: Counter[str]) -> str:
    return ", ".join(f"{verb} {n}" for verb, n in counts.most_common() if n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=4000, help="one-GPU jobs")
    parser.add_argument("--gangs", type=int, default=50, help="gangs of 8 workers × 8 GPUs")
    parser.add_argument("--teams", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per phase")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()

    print(f"calibration: sum(range(10**6)) best of 5 = {calibration() * 1000:.1f} ms")
    print(f"cores: {os.cpu_count()}; python {sys.version.split()[0]}")
    tmp = Path(tempfile.mkdtemp(prefix="gq-kube-"))
    tmp.chmod(0o755)  # the embedded PostgreSQL runs as another user when we are root
    servers: list[Any] = []
    plane = None
    try:
        servers = start_services(tmp)
        namespaces = [f"team-{i}" for i in range(args.teams)]
        started = time.perf_counter()
        plane, admin = start_cluster(tmp, args.nodes, namespaces)
        print(f"control plane with {args.nodes} nodes up in {time.perf_counter() - started:.0f} s")
        from kubernetes import client

        core, batch = client.CoreV1Api(admin), client.BatchV1Api(admin)
        flavor, user, teams = build_world(args.teams, args.nodes * GPUS_PER_NODE)
        phases = []
        if args.jobs:
            backend = make_backend(plane.kubeconfig, namespaces)
            take_inventory(backend, args.nodes)
            phases.append(
                run_phase(
                    "single", backend, admin, user, flavor, teams, args.jobs, 1, 1, args.timeout
                )
            )
            report(phases[-1])
        if args.gangs:
            if args.jobs:
                empty_cluster(core, batch, namespaces)
            backend = make_backend(plane.kubeconfig, namespaces)
            take_inventory(backend, args.nodes)
            phases.append(
                run_phase(
                    "gangs", backend, admin, user, flavor, teams, args.gangs, 8, 8, args.timeout
                )
            )
            report(phases[-1])
        return 0 if all(p["bound"] >= p["pods"] for p in phases) else 1
    finally:
        if plane is not None:
            plane.stop()
        for server in servers:
            server.stop()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
