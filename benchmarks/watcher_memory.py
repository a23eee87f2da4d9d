"""Memory the watcher's copy of the cluster holds, projected and whole. Prints numbers; not a test.

    .venv/bin/python benchmarks/watcher_memory.py                  # 500 nodes, 5,000 pods
    .venv/bin/python benchmarks/watcher_memory.py --nodes 100 --pods 1000

1. Start the control plane of tests/kube/controlplane.py with --nodes kwok nodes of 8 H100 each
   and two namespaces.
2. Create --pods pods through Deployments (the shape of a cluster's other workloads: owner
   references, an environment, ports, probes, volumes; a quarter of them hold one GPU); the
   ReplicaSet controller creates them, kube-scheduler binds them, kwok runs them. Wait until
   every one is Running.
3. For each way of keeping objects, in a fresh interpreter: list nodes and pods as the watcher
   does (KubernetesBackend._list, in pages) into a Store, then measure what stays: the RSS
   grown since before the list, and, listing once more under tracemalloc, the bytes still
   allocated once the list is done (the Store alone) and the peak while listing. "whole" is the
   object minus managedFields (`without_managed_fields`), "projected" the allow-list of
   gpuqueue.cluster.projection.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kube_scale import GPUS_PER_NODE, H100, calibration  # noqa: E402

NAMESPACES = ("bench-a", "bench-b")
REPLICAS = 250  # pods per Deployment, at most


def deployment(name: str, replicas: int, gpus: int) -> dict[str, Any]:
    """A Deployment shaped like a serving or notebook workload, as a cluster's other teams run."""
    labels = {"app": name, "team": "research", "tier": "inference"}
    limits = {"cpu": "2", "memory": "8Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
                },
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "server",
                            "image": "ghcr.io/acme/model-server:2024.06.1",
                            "args": ["--model=/models/llama", "--port=8080", "--metrics=9090"],
                            "env": [
                                {"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(8)
                            ],
                            "ports": [
                                {"name": "http", "containerPort": 8080},
                                {"name": "metrics", "containerPort": 9090},
                            ],
                            "resources": {
                                "requests": {"cpu": "1", "memory": "4Gi"},
                                "limits": limits,
                            },
                            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                            "volumeMounts": [{"name": "models", "mountPath": "/models"}],
                        }
                    ],
                    "volumes": [{"name": "models", "emptyDir": {}}],
                },
            },
        },
    }


def start_cluster(tmp: Path, nodes: int, pods: int) -> Any:
    """Steps 1 and 2; the control plane is stopped if they fail."""
    from tests.kube.controlplane import ControlPlane, build

    plane = ControlPlane(tmp / "kube", build())
    try:
        fill_cluster(plane, nodes, pods)
    except BaseException:
        plane.stop()
        raise
    return plane


def fill_cluster(plane: Any, nodes: int, pods: int) -> None:
    from kubernetes import client

    from tests.kube.controlplane import (
        api_client_for,
        create_namespaces,
        create_nodes,
        fake_node,
        wait_nodes_ready,
    )

    plane.start()
    api = api_client_for(plane.kubeconfig)
    manifests = [
        fake_node(f"h100-{i}", {"nvidia.com/gpu": GPUS_PER_NODE}, labels=H100) for i in range(nodes)
    ]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda part: create_nodes(api, manifests[part::8]), range(8)))
    wait_nodes_ready(api, [n["metadata"]["name"] for n in manifests], timeout=600)
    create_namespaces(api, list(NAMESPACES))
    apps = client.AppsV1Api(api)
    count = max(4, -(-pods // REPLICAS))  # at least 4, so that a quarter hold GPUs
    for i in range(count):
        replicas = pods // count + (1 if i < pods % count else 0)
        gpus = 1 if i % 4 == 0 else 0
        apps.create_namespaced_deployment(
            NAMESPACES[i % len(NAMESPACES)], deployment(f"serve-{i}", replicas, gpus)
        )
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + 1200
    while (running := count_running(core)) < pods:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {running} of {pods} pods running after 20 min")
        time.sleep(2)


def count_running(core: Any) -> int:
    running, token = 0, None
    while True:
        page = json.loads(
            core.list_pod_for_all_namespaces(
                limit=1000, _continue=token, _preload_content=False
            ).data
        )
        running += sum(1 for p in page["items"] if p["status"].get("phase") == "Running")
        if not (token := page["metadata"].get("continue")):
            return running


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(kubeconfig: str, keep: str) -> dict[str, Any]:
    """Step 3, in this (fresh) interpreter: what a Store of nodes and pods holds."""
    from gpuqueue.cluster.k8s_calls import Caller
    from gpuqueue.cluster.k8s_watch import Store, without_managed_fields
    from gpuqueue.cluster.kubernetes import KubernetesBackend
    from gpuqueue.cluster.projection import projector
    from tests.kube.controlplane import api_client_for

    backend = KubernetesBackend(api_client_for(Path(kubeconfig)), caller=Caller(attempts=3))
    lists = {"nodes": backend.core.list_node, "pods": backend.core.list_pod_for_all_namespaces}

    def fill(store: Store) -> None:
        for kind, fn in lists.items():
            shape = projector(kind) if keep == "projected" else without_managed_fields
            store.replace(kind, backend._list(f"list {kind}", fn, shape=shape)["items"])

    fill(Store())  # warm up: imports, connections, interned strings
    gc.collect()
    before = rss_bytes()
    store = Store()
    fill(store)
    gc.collect()
    rss_delta = rss_bytes() - before
    counts = {kind: len(store.items(kind)) for kind in lists}
    json_bytes = {kind: len(json.dumps(store.items(kind))) for kind in lists}
    del store
    gc.collect()
    tracemalloc.start()
    store = Store()
    fill(store)
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "keep": keep,
        "counts": counts,
        "held": held,
        "peak": peak,
        "rss_delta": rss_delta,
        "json_bytes": json_bytes,
    }


def mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--measure", choices=("whole", "projected"), help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.kubeconfig, args.measure)))
        return 0

    print(f"calibration: sum(range(10**6)) best of 5 = {calibration() * 1000:.1f} ms")
    print(f"cores: {os.cpu_count()}; python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="gq-watch-mem-") as tmp:
        started = time.perf_counter()
        plane = start_cluster(Path(tmp), args.nodes, args.pods)
        try:
            print(
                f"{args.nodes} nodes and {args.pods} running pods"
                f" in {time.perf_counter() - started:.0f} s"
            )
            results = []
            for keep in ("whole", "projected"):
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--measure",
                        keep,
                        "--kubeconfig",
                        str(plane.kubeconfig),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                results.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            plane.stop()
    for r in results:
        objects = sum(r["counts"].values())
        print(
            f"{r['keep']:>9}: {r['counts']['nodes']} nodes, {r['counts']['pods']} pods;"
            f" held {mib(r['held'])} ({r['held'] / objects / 1024:.1f} KiB per object),"
            f" peak while listing {mib(r['peak'])}, RSS +{mib(r['rss_delta'])};"
            f" as JSON: nodes {mib(r['json_bytes']['nodes'])}, pods {mib(r['json_bytes']['pods'])}"
        )
    whole, projected = results
    print(
        f"projected / whole: held {projected['held'] / whole['held']:.1%},"
        f" RSS growth {projected['rss_delta'] / max(whole['rss_delta'], 1):.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
