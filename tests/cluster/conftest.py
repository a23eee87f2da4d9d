"""Fixtures for the Kubernetes backend: a kmock emulator served on its own event loop in a
thread (kmock is async, the Django tests are not), and a backend talking to it over HTTP with
the official client.

kmock keeps the objects it is sent and serves list, watch, get, merge patch and delete, with 409
and 404; it has no controllers (a Job never gets pods: tests create them, playing the Job
controller and the kubelet), ignores label selectors, and sets no resourceVersion.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import kmock
import pytest
from kubernetes import client

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.k8s_calls import Caller
from gpuqueue.cluster.kubernetes import KubernetesBackend
from gpuqueue.cluster.manifests import ClusterOptions
from gpuqueue.cluster.proof import Ours, Record, sort_out

PODS = kmock.resource("v1/pods")
NODES = kmock.resource("v1/nodes")
JOBS = kmock.resource("batch/v1/jobs")
SERVICES = kmock.resource("v1/services")
SECRETS = kmock.resource("v1/secrets")


@attrs.define(kw_only=True)
class FaultyEmulator(kmock.KubernetesEmulator):
    """kmock's emulator, plus faults that strike before it stores anything: an API server that
    refused (429, 403, 422) or never answered (a delay past the client's timeout). kmock's own
    reactions strike after it stored the object: a server that committed, then failed to say so.
    """

    faults: list[tuple[str, str, Any]] = attrs.field(factory=list)

    async def _handle(self, request: Any) -> Any:
        for fault in list(self.faults):
            method, path_part, what = fault
            if request.method.value == method and path_part in str(request.url):
                self.faults.remove(fault)
                if isinstance(what, float):
                    await asyncio.sleep(what)
                    break
                raise kmock.KubernetesError(status=what[0], reason=what[1], message=what[2])
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            # As an API server does: every object gets a uid, which gpuqueue's proof of what it
            # made (ownerReferences, recorded uids) is built on.
            request.data.setdefault("metadata", {}).setdefault("uid", str(uuid.uuid4()))
        return await super()._handle(request)


class Emulator:
    """A kmock KubernetesEmulator on loopback, run by a private event loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="kmock", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("kmock did not start")

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._main_task = asyncio.current_task()
        self._stop = asyncio.Event()
        async with FaultyEmulator() as handler, kmock.Server(handler) as server:
            self.kmock: Any = handler
            for resource in (PODS, NODES, JOBS, SERVICES, SECRETS):
                handler.resources[resource] = {}  # listable before the first object exists
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def stop(self) -> None:
        async def shutdown() -> None:
            # Watch streams never end on their own: cancel their handlers, or the server's
            # shutdown waits for them.
            for task in asyncio.all_tasks():
                if task is not main and task is not asyncio.current_task():
                    task.cancel()
            self._stop.set()

        main = self._main_task
        asyncio.run_coroutine_threadsafe(shutdown(), self.loop)
        self._thread.join(10)

    def fail(self, method: str, path_part: str, status: int, message: str, times: int = 1) -> None:
        """The next `times` matching requests are refused with `status`, storing nothing."""
        reason = {403: "Forbidden", 409: "AlreadyExists", 422: "Invalid", 429: "TooManyRequests"}
        for _ in range(times):
            self.kmock.faults.append(
                (method.upper(), path_part, (status, reason.get(status, "InternalError"), message))
            )

    def delay(self, method: str, path_part: str, seconds: float, times: int = 1) -> None:
        """The next `times` matching requests are answered only after `seconds`."""
        self.kmock.faults.extend([(method.upper(), path_part, float(seconds))] * times)

    def requests(self, method: str, path_part: str = "") -> list[Any]:
        """The requests served so far with this method whose URL contains `path_part`."""
        return [
            r
            for r in list(self.kmock)
            if r.method.value == method.upper() and path_part in str(r.url)
        ]

    def objects(self, resource: Any) -> dict[tuple[str | None, str], dict[str, Any]]:
        """Live objects of a resource: {(namespace, name): object}."""
        found = {}
        for (res, namespace, name), obj in list(self.kmock.objects.items()):
            if res == resource and not obj.deleted:
                found[(namespace, name)] = obj.raw
        return found

    def api(self) -> client.ApiClient:
        configuration = client.Configuration(host=self.url)
        configuration.retries = 0  # as KubernetesBackend.from_settings: retries are gpuqueue's
        return client.ApiClient(configuration)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """The shared `world` fixture creates four users; the default hasher takes most of a second
    for each, which is the test suite's time, not anything under test here."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = Emulator()
    yield emu
    emu.stop()


@pytest.fixture
def make_backend(emulator: Emulator) -> Callable[..., KubernetesBackend]:
    """make_backend(**overrides): a KubernetesBackend against the emulator; no real sleeping
    between retries (the sleeps are recorded on `backend.slept`)."""

    def make(**overrides: Any) -> KubernetesBackend:
        slept: list[float] = []
        options = dict(
            options=ClusterOptions(public_url="http://gpuqueue.test"),
            caller=Caller(attempts=3, backoff_seconds=0.5, sleep=slept.append),
            timeout_seconds=2.0,
            namespaces=lambda: ["team-a", "team-b"],
        )
        options.update(overrides)
        backend = KubernetesBackend(emulator.api(), **options)
        backend.slept = slept  # type: ignore[attr-defined]
        return backend

    return make


@pytest.fixture
def k8s(make_backend: Callable[..., KubernetesBackend]) -> KubernetesBackend:
    return make_backend()


def node(
    name: str,
    gpus: int = 8,
    *,
    product: str = "NVIDIA-H100-80GB-HBM3",
    ready: bool = True,
    resource: str = "nvidia.com/gpu",
    **extra: Any,
) -> dict[str, Any]:
    """A GPU node as the API shows it with the GPU Operator installed."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                **extra.pop("labels", {}),
            },
        },
        "spec": {
            "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            **extra.pop("spec", {}),
        },
        "status": {
            "allocatable": {"cpu": "96", resource: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def add_nodes(api: client.ApiClient, *nodes: dict[str, Any]) -> None:
    core = client.CoreV1Api(api)
    for item in nodes:
        core.create_node(item)


def run_job_pods(
    api: client.ApiClient,
    job: dict[str, Any],
    nodes: list[str],
    phase: str = "Running",
    **container_state: Any,
) -> list[dict[str, Any]]:
    """Play the Job controller and the kubelet (kmock has neither): one pod per index of the
    Job, from its template, bound to `nodes` in turn, in `phase`."""
    core = client.CoreV1Api(api)
    meta, spec = job["metadata"], job["spec"]
    template = spec["template"]
    pods = []
    for index in range(spec["parallelism"]):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{index}-x{index}",
                "namespace": meta["namespace"],
                "labels": dict(template["metadata"]["labels"]),
                # The Job controller's: the pod's controller is its Job.
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta.get("uid", ""),
                        "controller": True,
                    }
                ],
                "annotations": {
                    **template["metadata"].get("annotations", {}),
                    "batch.kubernetes.io/job-completion-index": str(index),
                },
            },
            "spec": {**template["spec"], "nodeName": nodes[index % len(nodes)]},
            "status": {
                "phase": phase,
                "startTime": "2026-11-22T10:00:00Z",
                "containerStatuses": [
                    {
                        "name": "worker",
                        "ready": phase == "Running",
                        "restartCount": 0,
                        "image": template["spec"]["containers"][0]["image"],
                        "imageID": "",
                        "state": container_state or {"running": {}},
                    }
                ],
            },
        }
        core.create_namespaced_pod(meta["namespace"], pod)
        pods.append(pod)
    return pods


def made_by_gpuqueue(job: dict[str, Any], pods: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """Give a hand-built Job and its pods what the API and the Job controller give gpuqueue's:
    uids, the Job owned by its attempt's Secret, each pod's controller its Job. Returns the
    Job."""
    meta = job.setdefault("metadata", {})
    name = meta["name"]
    meta.setdefault("namespace", "team-a")
    meta.setdefault("uid", f"uid-of-job-{name}")
    meta.setdefault(
        "ownerReferences",
        [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "name": f"{name}-token",
                "uid": f"uid-of-secret-{name}",
            }
        ],
    )
    for pod in pods:
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": name,
                "uid": meta["uid"],
                "controller": True,
            }
        ]
    return job


def records_of(*jobs: dict[str, Any]) -> dict[tuple[int, int], Record]:
    """What the database recorded when gpuqueue launched these Jobs (made_by_gpuqueue)."""
    out = {}
    for job in jobs:
        meta = job["metadata"]
        key = mf.attempt_of(job)
        assert key is not None
        out[key] = Record(
            namespace=meta["namespace"],
            proof="",
            secret_uid=meta["ownerReferences"][0]["uid"],
            job_uid=meta["uid"],
        )
    return out


def proven(jobs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Ours:
    """The Jobs and pods gpuqueue proves it made, the records being those of `jobs`."""
    return sort_out(jobs, pods, records_of(*jobs))
