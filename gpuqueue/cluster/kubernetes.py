"""The Kubernetes backend: admitted jobs become Indexed Jobs on their planned nodes.

Everything goes through the official `kubernetes` client. Objects are read as plain JSON
(`_preload_content=False`) and handed to the pure modules next to this one: `inventory` (nodes),
`status` (workload phases) and `manifests` (what is created). The watcher (`k8s_watch`) keeps a
live copy of nodes, pods and Jobs; without it every read lists from the API.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import secrets
from collections import defaultdict
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from kubernetes import client

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.base import (
    ClusterBackend,
    ClusterError,
    LaunchSpec,
    LogNotFound,
    LogQuery,
    NodeInfo,
    WorkerLog,
    WorkloadStatus,
)
from gpuqueue.cluster.gates import Release, releases
from gpuqueue.cluster.inventory import inventory, not_ready_since
from gpuqueue.cluster.k8s_calls import Caller, Conflict, NotFound
from gpuqueue.cluster.k8s_watch import Store, run_watcher, without_managed_fields
from gpuqueue.cluster.projection import projector
from gpuqueue.cluster.status import parse_time, workload_statuses

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Key = tuple[int, int]  # (job id, attempt)
# A Job still short of pods this long after its creation: read why (FailedCreate events).
REFUSAL_CHECK = timedelta(seconds=3)


def _json(response: Any) -> Obj:
    """The body of a response read with `_preload_content=False` (plain JSON, no models)."""
    body: Obj = json.loads(response.data or b"{}")
    return body


def _token_in(secret: Obj) -> str | None:
    if value := (secret.get("data") or {}).get(mf.TOKEN_KEY):
        return base64.b64decode(value).decode()
    return (secret.get("stringData") or {}).get(mf.TOKEN_KEY)


def team_namespaces() -> list[str]:
    """Where gpuqueue's Jobs live: one namespace per team (the RBAC of deploy/ grants Jobs,
    Services and Secrets there only)."""
    from teams.models import Team

    return sorted(set(Team.objects.values_list("namespace", flat=True)))


def job_namespace(job_id: int) -> str | None:
    from gpuqueue.models import Job

    return Job.objects.filter(pk=job_id).values_list("team__namespace", flat=True).first()


class KubernetesBackend(ClusterBackend):
    name = "kubernetes"

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        options: mf.ClusterOptions | None = None,
        caller: Caller | None = None,
        timeout_seconds: float = 10.0,
        image_pull_timeout_seconds: float = 300.0,
        namespaces: Callable[[], list[str]] = team_namespaces,
        clock: Callable[[], datetime] = timezone.now,
        node_lost_grace_seconds: float = 300.0,
        concurrency: int = 16,
        page_size: int = 500,
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.options = options or mf.ClusterOptions()
        self.call = caller or Caller()
        self.timeout = timeout_seconds
        self.pull_timeout = timedelta(seconds=image_pull_timeout_seconds)
        self.namespaces = namespaces
        self.clock = clock
        # Filled by the watcher; while it is live, reads come from it instead of the API.
        self.store = Store()
        self._hostnames: dict[str, str] = {}
        self.node_lost_grace = timedelta(seconds=node_lost_grace_seconds)
        self.concurrency = self.launch_concurrency = concurrency
        self.page_size = page_size
        self._not_ready: dict[str, datetime | None] | None = None
        self._pods_seen: list[Obj] | None = None
        self._nodes_seen: list[Obj] = []
        # The nodes, pods and Jobs the last observe() read, for release_gangs() in the same pass.
        self._observed: tuple[list[Obj], list[Obj], list[Obj]] | None = None
        self._held: dict[Key, str] = {}
        self._unseen: frozenset[str] = frozenset()
        self._refused: dict[Key, str] = {}
        self._refusals_checked: dict[str, datetime] = {}
        self._namespace_of: dict[tuple[int, int], str] = {}
        self._first_seen: dict[tuple[int, int], datetime] = {}

    @classmethod
    def from_settings(cls) -> KubernetesBackend:
        from django.conf import settings
        from kubernetes import config

        from gpuqueue.core.cluster_health import record_cluster

        configuration = client.Configuration()
        if settings.GPUQUEUE_K8S_KUBECONFIG:
            config.load_kube_config(
                config_file=settings.GPUQUEUE_K8S_KUBECONFIG,
                context=settings.GPUQUEUE_K8S_CONTEXT,
                client_configuration=configuration,
            )
        else:
            config.load_incluster_config(client_configuration=configuration)
        configuration.retries = 0  # retries are ours (k8s_calls), with backoff and health
        # One connection per thread that releases gangs (release_gangs), kept between passes.
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, 16)
        return cls(
            client.ApiClient(configuration),
            options=mf.ClusterOptions(
                gpu_taint=settings.GPUQUEUE_K8S_GPU_TAINT,
                master_port=settings.GPUQUEUE_K8S_MASTER_PORT,
                public_url=settings.GPUQUEUE_PUBLIC_URL,
            ),
            caller=Caller(
                attempts=settings.GPUQUEUE_K8S_API_RETRIES,
                backoff_seconds=settings.GPUQUEUE_K8S_API_BACKOFF_SECONDS,
                on_health=record_cluster,
            ),
            timeout_seconds=settings.GPUQUEUE_K8S_API_TIMEOUT_SECONDS,
            image_pull_timeout_seconds=settings.GPUQUEUE_K8S_IMAGE_PULL_TIMEOUT_SECONDS,
            node_lost_grace_seconds=settings.GPUQUEUE_NODE_LOST_GRACE_SECONDS,
        )

    # Reading -----------------------------------------------------------------------------

    def _list(
        self,
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        call: Caller | None = None,
        shape: Callable[[Obj], Obj] = without_managed_fields,
        **kwargs: Any,
    ) -> Obj:
        """A LIST as plain JSON (items and the list's resourceVersion), in pages of
        `page_size` (a big cluster's pods in one response would be hundreds of MB). The
        managedFields of each item, which nothing here reads, are dropped, or each item is cut
        to `shape` (gpuqueue.cluster.projection). `call`: another retry policy than the
        backend's."""
        items: list[Obj] = []
        token: str | None = None
        while True:
            page = _json(
                (call or self.call)(
                    what,
                    fn,
                    *args,
                    limit=self.page_size,
                    _continue=token,
                    _preload_content=False,
                    _request_timeout=self.timeout,
                    **kwargs,
                )
            )
            items += [shape(item) for item in page.get("items") or []]
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") or None
            if token is None:  # every page carries the resourceVersion of the whole list
                return {"items": items, "metadata": metadata}

    def list_raw_nodes(self) -> Obj:
        return self._list("list nodes", self.core.list_node, shape=projector("nodes"))

    def list_raw_pods(self) -> Obj:
        """Every pod cluster-wide: gpuqueue's workers and the GPUs others hold."""
        return self._list(
            "list pods", self.core.list_pod_for_all_namespaces, shape=projector("pods")
        )

    def list_raw_jobs(self, namespace: str) -> Obj:
        return self._list(
            f"list jobs in {namespace}",
            self.batch.list_namespaced_job,
            namespace,
            label_selector=mf.SELECTOR,
            shape=projector("jobs"),
        )

    def _current(self) -> tuple[list[Obj], list[Obj], list[Obj] | None]:
        """Nodes, pods and gpuqueue Jobs (None when only nodes and pods were needed)."""
        if self.store.live:
            return self.store.items("nodes"), self.store.items("pods"), self.store.items("jobs")
        return self.list_raw_nodes()["items"], self.list_raw_pods()["items"], None

    def list_nodes(self, live: Collection[tuple[int, int]] | None = None) -> list[NodeInfo]:
        nodes, pods, _ = self._current()
        self._remember_nodes(nodes)
        self._pods_seen = pods  # observe() in the same pass needs them too
        return inventory(nodes, pods, live)

    def _remember_nodes(self, nodes: list[Obj]) -> None:
        self._nodes_seen = nodes
        for node in nodes:
            meta = node.get("metadata") or {}
            labels = meta.get("labels") or {}
            self._hostnames[meta["name"]] = str(labels.get("kubernetes.io/hostname", meta["name"]))
        self._not_ready = {n["metadata"]["name"]: not_ready_since(n) for n in nodes}

    def observe(self) -> list[WorkloadStatus]:
        """The phase of every gpuqueue workload. A gang whose pods the API refused (FailedCreate
        events of its Job) or that release_gangs() held back is a failed start."""
        if self.store.live:
            nodes, pods, jobs = self._current()
            assert jobs is not None
            self._remember_nodes(nodes)
            self._unseen = self.store.unseen
        else:
            # sync_cluster lists nodes (and so pods) just before; otherwise list them now.
            if self._pods_seen is None or self._not_ready is None:
                self.list_nodes()
            pods, self._pods_seen = self._pods_seen or [], None
            jobs, unseen = [], set()
            for namespace in self.namespaces():
                try:
                    jobs += self.list_raw_jobs(namespace)["items"]
                except ClusterError as exc:
                    if exc.transient:
                        raise  # the API is away: the whole pass waits for it
                    log.warning("jobs in %s cannot be read: %s", namespace, exc)
                    self.call.on_health(False, str(exc))
                    unseen.add(namespace)
            self._unseen = frozenset(unseen)
        now = self.clock()
        for job in jobs:
            if (key := mf.attempt_of(job)) is not None:
                self._namespace_of[key] = job["metadata"].get("namespace", "")
                self._first_seen.setdefault(key, now)
        self._observed = (self._nodes_seen, pods, jobs)
        problems = {**self._refusals(jobs, pods, now), **self._held}
        return workload_statuses(
            jobs,
            pods,
            self._not_ready or {},
            now,
            self.pull_timeout,
            self._first_seen,
            node_lost_grace=self.node_lost_grace,
            start_problems=problems,
        )

    def unseen_namespaces(self) -> Collection[str]:
        return self._unseen

    def _refusals(self, jobs: list[Obj], pods: list[Obj], now: datetime) -> dict[Key, str]:
        """Why the API refused the pods of Jobs that still lack some after REFUSAL_CHECK: the
        Job controller's FailedCreate events (a ResourceQuota, Pod Security, a webhook). One
        LIST of those events per namespace that has such a Job, at most every REFUSAL_CHECK."""
        have: dict[Key, int] = defaultdict(int)
        for pod in pods:
            if (key := mf.attempt_of(pod)) is not None:
                have[key] += 1
        short: dict[str, dict[str, Key]] = defaultdict(dict)  # namespace -> {job uid: attempt}
        for job in jobs:
            key, meta = mf.attempt_of(job), job.get("metadata") or {}
            created = parse_time(meta.get("creationTimestamp")) or now
            workers = int((job.get("spec") or {}).get("parallelism") or 0)
            if (
                key is not None
                and have[key] < workers
                and now - created >= REFUSAL_CHECK
                and not meta.get("deletionTimestamp")
            ):
                short[meta.get("namespace", "")][meta.get("uid", "")] = key
        still_short = {key for by_uid in short.values() for key in by_uid.values()}
        self._refused = {k: v for k, v in self._refused.items() if k in still_short}
        found: dict[Key, str] = {}
        for namespace, by_uid in short.items():
            last = self._refusals_checked.get(namespace)
            if last is not None and now - last < REFUSAL_CHECK:
                found.update({k: v for k, v in self._refused.items() if k in by_uid.values()})
                continue
            self._refusals_checked[namespace] = now
            try:
                events = self._list(
                    f"list events in {namespace}",
                    self.core.list_namespaced_event,
                    namespace,
                    field_selector="involvedObject.kind=Job,reason=FailedCreate",
                )["items"]
            except ClusterError as exc:
                log.warning("cannot read why pods were refused: %s", exc)
                continue
            for event in events:
                key = by_uid.get((event.get("involvedObject") or {}).get("uid", ""))
                if key is not None:
                    message = str(event.get("message") or "").removeprefix("Error creating: ")
                    found[key] = self._refused[key] = f"pods refused: {message}"
        return found

    def release_gangs(self) -> int:
        """Release every gated gang whose pods all exist and whose planned nodes have room,
        each pod to its planned node (gpuqueue.cluster.gates); remember the gangs held back
        for the next observe(). Returns how many pods were released."""
        if self.store.live:
            nodes, pods, jobs = self._current()
            assert jobs is not None
        elif self._observed is not None:
            nodes, pods, jobs = self._observed
        else:
            return 0
        out, self._held = releases(jobs, pods, nodes)
        for why in self._held.values():
            log.info("gang held back: %s", why)

        def release(one: Release) -> bool:
            try:
                self.call(
                    f"release pod {one.namespace}/{one.name}",
                    self.core.patch_namespaced_pod,
                    one.name,
                    one.namespace,
                    one.patch(),
                    _content_type="application/json-patch+json",
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
            except (NotFound, ClusterError) as exc:
                log.warning("release of pod %s/%s deferred: %s", one.namespace, one.name, exc)
                return False
            return True

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:  # threads made as needed
            return sum(pool.map(release, out))

    # Writing -----------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> str | None:
        """Create the attempt's Secret, then its Service and Job owned by the Secret; anything
        already there is adopted, so launching twice is harmless, and a launch cut short is
        completed by the next sync (no Job yet: it launches again). Returns the token in the
        Secret. Safe to call from several threads at once.

        1. Name the planned nodes by their hostname label, for the plan the pods carry.
        2. The token Secret: a new token, or the one an earlier launch already stored there
           (returned either way, for the caller to keep its hash). It owns the other two, so
           deleting it removes everything of the attempt.
        3. The headless Service, then the Indexed Job, whose pods wait behind the placement
           gate until the watcher releases the gang (release_gangs). A Job the API refuses
           takes its Secret and Service with it.
        """
        key = (spec.job_id, spec.attempt)
        self._namespace_of[key] = spec.namespace
        self._first_seen.setdefault(key, self.clock())
        # 1.
        if any(n not in self._hostnames for n in spec.placement):
            self._remember_nodes(self.list_raw_nodes()["items"])
        hostnames = {n: self._hostnames.get(n, n) for n in spec.placement}
        # 2.
        token = f"gqj_{spec.job_id}_{secrets.token_urlsafe(32)}"
        try:
            owner = self._create(
                "secret",
                self.core.create_namespaced_secret,
                spec.namespace,
                mf.secret_manifest(spec, token),
            )
        except Conflict:
            owner = self._read_secret(spec)
            token = _token_in(owner) or token
        # 3.
        for kind, fn, body in (
            ("service", self.core.create_namespaced_service, mf.service_manifest(spec, owner)),
            (
                "job",
                self.batch.create_namespaced_job,
                mf.job_manifest(spec, self.options, hostnames, owner),
            ),
        ):
            try:
                self._create(kind, fn, spec.namespace, body)
            except Conflict:
                log.info("%s %s/%s exists: adopted", kind, spec.namespace, body["metadata"]["name"])
            except ClusterError as exc:
                if not exc.transient:
                    self.stop(spec.job_id, spec.attempt)
                raise
        return token

    def _read_secret(self, spec: LaunchSpec) -> Obj:
        """The attempt's Secret, which a create just found (409); gone meanwhile (deleted
        between the two calls) is transient: the next sync launches again."""
        name = mf.token_secret_name(spec.job_id, spec.attempt)
        try:
            response = self.call(
                f"read secret {spec.namespace}/{name}",
                self.core.read_namespaced_secret,
                name,
                spec.namespace,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except NotFound as exc:
            raise ClusterError(
                f"read secret {spec.namespace}/{name}: {exc}", transient=True
            ) from exc
        return _json(response)

    def _create(self, kind: str, fn: Callable[..., Any], namespace: str, body: Obj) -> Obj:
        """Create one object; returns it as the API stored it."""
        name = body["metadata"]["name"]
        try:
            response = self.call(
                f"create {kind} {namespace}/{name}",
                fn,
                namespace,
                body,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except NotFound as exc:  # the team's namespace does not exist: no retry helps
            raise ClusterError(
                f"create {kind} {namespace}/{name}: {exc.message}", transient=False
            ) from exc
        return _json(response)

    def request_checkpoint(self, job_id: int, attempt: int, deadline: datetime) -> None:
        """Annotate every pod of the attempt with the deadline (the workload reads it from its
        downward-API file); a pod that already carries it is left alone."""
        patch = mf.checkpoint_patch(deadline)
        wanted = patch["metadata"]["annotations"][mf.CHECKPOINT_ANNOTATION]
        for pod in self._pods_of(job_id, attempt):
            meta = pod["metadata"]
            if (meta.get("annotations") or {}).get(mf.CHECKPOINT_ANNOTATION) == wanted:
                continue
            try:
                self.call(
                    f"annotate pod {meta.get('namespace')}/{meta['name']}",
                    self.core.patch_namespaced_pod,
                    meta["name"],
                    meta["namespace"],
                    patch,
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
            except NotFound:
                continue  # the pod went away meanwhile: nothing left to ask

    def _pods_of(self, job_id: int, attempt: int, call: Caller | None = None) -> list[Obj]:
        if self.store.live:
            pods = self.store.items("pods")
        else:
            pods = self._list(
                "list pods",
                self.core.list_pod_for_all_namespaces,
                label_selector=mf.attempt_selector(job_id, attempt),
                call=call,
                shape=projector("pods"),
            )["items"]
        return [p for p in pods if mf.attempt_of(p) == (job_id, attempt)]

    def read_log(self, job_id: int, attempt: int, worker: int, query: LogQuery) -> WorkerLog:
        """The worker container's log in the pod of completion index `worker` (the newest such
        pod, when the Job controller replaced one). One try per call, no backoff: a person or
        a poll waits on it, and the API's 503 tells them when to ask again."""
        once = Caller(attempts=1, on_health=self.call.on_health)
        pods = [
            pod
            for pod in self._pods_of(job_id, attempt, once)
            if mf.completion_index(pod) == str(worker)
        ]
        if not pods:
            raise LogNotFound(f"job {job_id} has no worker {worker} in attempt {attempt}")
        meta = max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")["metadata"]
        try:
            response = once(
                f"read log of pod {meta.get('namespace')}/{meta['name']}",
                self.core.read_namespaced_pod_log,
                meta["name"],
                meta["namespace"],
                container=mf.CONTAINER,
                tail_lines=query.tail_lines,
                limit_bytes=query.limit_bytes,
                since_seconds=query.since_seconds,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except NotFound as exc:  # deleted between the two calls
            raise LogNotFound(f"job {job_id} has no worker {worker} in attempt {attempt}") from exc
        data: bytes = response.data or b""
        truncated = query.limit_bytes is not None and len(data) >= query.limit_bytes
        return WorkerLog(
            lines=tuple(data.decode(errors="replace").splitlines()), truncated=truncated
        )

    def stop(self, job_id: int, attempt: int) -> None:
        """Delete the Job (its pods get SIGTERM and their grace period), the Service and the
        Secret; whatever is already gone is fine."""
        key = (job_id, attempt)
        namespace = self._namespace_of.get(key) or job_namespace(job_id)
        if not namespace:
            log.warning("stop of job %s: its namespace is unknown", job_id)
            return
        name = mf.workload_name(job_id, attempt)
        body = client.V1DeleteOptions(propagation_policy="Background")
        for kind, fn, obj_name in (
            ("job", self.batch.delete_namespaced_job, name),
            ("service", self.core.delete_namespaced_service, name),
            ("secret", self.core.delete_namespaced_secret, mf.token_secret_name(job_id, attempt)),
        ):
            with contextlib.suppress(NotFound):
                self.call(
                    f"delete {kind} {namespace}/{obj_name}",
                    fn,
                    obj_name,
                    namespace,
                    body=body,
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
        self._first_seen.pop(key, None)

    # Watching ----------------------------------------------------------------------------

    def watch(
        self, should_stop: Callable[[], bool], sync: Callable[[], None], **timing: Any
    ) -> None:
        """Follow the cluster until `should_stop()`, calling `sync` after every change: see
        gpuqueue.cluster.k8s_watch.run_watcher (which takes `timing`)."""
        run_watcher(self, should_stop, sync, **timing)
