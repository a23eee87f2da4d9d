"""The Kubernetes backend: admitted jobs become Indexed Jobs on their planned nodes.

Everything goes through the official `kubernetes` client. Objects are read as plain JSON
(`_preload_content=False`) and handed to the pure modules next to this one: `inventory` (nodes),
`status` (workload phases) and `manifests` (what is created). The watcher (`k8s_watch`) keeps a
live copy of nodes, pods and Jobs; without it every read lists from the API.

What the backend believes comes only from objects it proves it made (`proof`, against the
records the database keeps: `records`), in namespaces this install claimed (`claim`): a marker
ConfigMap in each team namespace names the install that owns it, and a second install on the
same namespaces refuses to start.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import secrets
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from kubernetes import client

from gpuqueue.cluster import frameworks, proof, sources
from gpuqueue.cluster import k8s_shared_claims as shared_claims
from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.base import (
    Claimed,
    ClusterBackend,
    ClusterError,
    Launched,
    LaunchSpec,
    LogNotFound,
    LogQuery,
    NodeInfo,
    Squatted,
    WorkerLog,
    WorkloadStatus,
)
from gpuqueue.cluster.dra import DeviceFlavor, dra_use, gate_room
from gpuqueue.cluster.gates import Release, dra_devices, is_gated, releases
from gpuqueue.cluster.inventory import inventory, not_ready_since, with_dra
from gpuqueue.cluster.k8s_calls import Caller, Conflict, NotFound, load_configuration
from gpuqueue.cluster.k8s_watch import QUEUED, Store, run_watcher, without_managed_fields
from gpuqueue.cluster.projection import projector
from gpuqueue.cluster.proof import MARKER, Ours, Record, marker_refusal, sort_out
from gpuqueue.cluster.records import recorded, this_install
from gpuqueue.cluster.status import is_permanent_refusal, parse_time, workload_statuses

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


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _namespace(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _squatted(kind: str, namespace: str, name: str) -> str:
    return (
        f"{kind} {namespace}/{name} already exists and is not gpuqueue's: it carries neither"
        " the proof gpuqueue puts on what it makes nor a uid gpuqueue recorded. Someone with"
        f" access to {namespace} made it under the name of this attempt; gpuqueue neither"
        " adopts nor deletes it, and the next attempt uses another name"
    )


def team_namespaces() -> list[str]:
    """Where gpuqueue's Jobs live: one namespace per team (the RBAC of deploy/ grants Jobs,
    Services and Secrets there only)."""
    from teams.models import Team

    return sorted(set(Team.objects.values_list("namespace", flat=True)))


def device_flavors() -> list[DeviceFlavor]:
    """The flavors whose GPUs are DRA devices: their DeviceClass and selector."""
    from gpuqueue.models import Flavor

    return [
        DeviceFlavor(f.resource_name, f.device_class, f.device_selector)
        for f in Flavor.objects.exclude(device_class="").order_by("name")
    ]


class KubernetesBackend(ClusterBackend):
    name = "kubernetes"
    withdraws_checkpoints = True

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
        instance: str = "gpuqueue",
        install: str = "",
        records: Callable[[Collection[int], str], Mapping[Key, Record]] = recorded,
        dra_flavors: Callable[[], list[DeviceFlavor]] = device_flavors,
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.resource = client.ResourceV1Api(api_client)
        self.scheduling = client.SchedulingV1beta1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        # The framework kinds the cluster serves (gpuqueue.cluster.frameworks): kind -> when
        # asked, and whether served; asked again a minute after a "no" (a CRD installed later).
        self._frameworks: dict[str, tuple[datetime, bool]] = {}
        # Whether the cluster serves PodGroups (None: not asked yet); see serves_pod_groups.
        self._pod_groups: bool | None = None
        self.dra_flavors = dra_flavors
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
        # The pods and what of them is ours, read by list_nodes() for observe() in the same
        # pass.
        self._seen: tuple[list[Obj], Ours] | None = None
        self._nodes_seen: list[Obj] = []
        # The nodes, pods and what is ours the last observe() read, for release_gangs().
        self._observed: tuple[list[Obj], list[Obj], Ours] | None = None
        self._held: dict[Key, str] = {}
        self._unseen: frozenset[str] = frozenset()
        self._unseen_sources: frozenset[str] = frozenset()
        self._unseen_frameworks: frozenset[str] = frozenset()
        self._refused: dict[Key, str] = {}
        self._refusals_checked: dict[str, datetime] = {}
        self._first_seen: dict[tuple[int, int], datetime] = {}
        # Who this install is: the label on everything it makes and in every selector, and the
        # uid of its database, which the marker in each team namespace names (`claim`).
        self.instance = instance
        self.install = install
        self.selector = mf.selector(instance)
        self.records = records
        self._claimed: set[str] = set()
        # Team namespaces another install (or someone) holds the marker of: left out, with why.
        self.refused: dict[str, str] = {}
        self._unproven_told: set[str] = set()  # uids of unproven Jobs already logged

    @classmethod
    def from_settings(cls) -> KubernetesBackend:
        from django.conf import settings

        from gpuqueue.core.cluster_health import record_cluster

        install = this_install(settings.GPUQUEUE_INSTANCE)
        configuration = client.Configuration()
        load_configuration(
            configuration, settings.GPUQUEUE_K8S_KUBECONFIG, settings.GPUQUEUE_K8S_CONTEXT
        )
        configuration.retries = 0  # retries are ours (k8s_calls), with backoff and health
        # One connection per thread that releases gangs (release_gangs), kept between passes.
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, 16)
        return cls(
            client.ApiClient(configuration),
            options=mf.ClusterOptions(
                gpu_taint=settings.GPUQUEUE_K8S_GPU_TAINT,
                master_port=settings.GPUQUEUE_K8S_MASTER_PORT,
                public_url=settings.GPUQUEUE_PUBLIC_URL,
                pin_visible_devices=settings.GPUQUEUE_K8S_PIN_VISIBLE_DEVICES,
                priority_class=settings.GPUQUEUE_K8S_PRIORITY_CLASS,
                node_lost_grace_seconds=settings.GPUQUEUE_NODE_LOST_GRACE_SECONDS,
                # A day past gpuqueue's own deletion: only ever a backstop.
                finished_ttl_seconds=int(settings.GPUQUEUE_K8S_KEEP_FINISHED_SECONDS) + 86400,
                gang_pdb=settings.GPUQUEUE_K8S_GANG_PDB,
            ),
            caller=Caller(
                attempts=settings.GPUQUEUE_K8S_API_RETRIES,
                backoff_seconds=settings.GPUQUEUE_K8S_API_BACKOFF_SECONDS,
                on_health=record_cluster,
            ),
            timeout_seconds=settings.GPUQUEUE_K8S_API_TIMEOUT_SECONDS,
            image_pull_timeout_seconds=settings.GPUQUEUE_K8S_IMAGE_PULL_TIMEOUT_SECONDS,
            node_lost_grace_seconds=settings.GPUQUEUE_NODE_LOST_GRACE_SECONDS,
            instance=install.instance,
            install=str(install.uid),
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
        """This install's Jobs in a team namespace (its instance label in the selector)."""
        return self._list(
            f"list jobs in {namespace}",
            self.batch.list_namespaced_job,
            namespace,
            label_selector=self.selector,
            shape=projector("jobs"),
        )

    def _list_jobs(self) -> tuple[list[Obj], frozenset[str]]:
        """This install's Jobs in every team namespace, and the namespaces that cannot be
        read (403: no RoleBinding there); the API away raises."""
        jobs: list[Obj] = []
        unseen: set[str] = set()
        for namespace in self.namespaces():
            if namespace in self.refused:
                continue
            try:
                jobs += self.list_raw_jobs(namespace)["items"]
            except ClusterError as exc:
                if exc.transient:
                    raise  # the API is away: the whole pass waits for it
                log.warning("jobs in %s cannot be read: %s", namespace, exc)
                self.call.on_health(False, str(exc))
                unseen.add(namespace)
        return jobs, frozenset(unseen)

    def _current(self) -> tuple[list[Obj], list[Obj], list[Obj]]:
        """Nodes, pods and this install's Jobs: the watcher's copy while it is live, else
        listed now. Sets the team namespaces whose Jobs cannot be seen."""
        if self.store.live:
            self._unseen = self.store.unseen
            jobs = self.store.items("jobs") + self._framework_views()
            return self.store.items("nodes"), self.store.items("pods"), jobs
        jobs, self._unseen = self._list_jobs()
        jobs += self._framework_views()
        return self.list_raw_nodes()["items"], self.list_raw_pods()["items"], jobs

    def serves(self, kind: str) -> bool:
        """Whether the API serves a framework's kind (its CRD installed), asked through
        discovery; a "no" is asked again after a minute."""
        now = self.clock()
        known = self._frameworks.get(kind)
        if known is not None and (known[1] or now - known[0] < timedelta(minutes=1)):
            return known[1]
        group, version, plural = frameworks.API[kind]
        try:
            found = _json(
                self.call(
                    f"discover {group}/{version}",
                    self.custom.get_api_resources,
                    group,
                    version,
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
            )
            served = plural in {r.get("name") for r in found.get("resources") or []}
        except NotFound:
            served = False
        except ClusterError as exc:
            log.warning("cannot tell whether the cluster serves %s: %s", kind, exc)
            return False
        self._frameworks[kind] = (now, served)
        return served

    def _list_framework(self, kind: str, namespace: str, selector: str) -> list[Obj]:
        group, version, plural = frameworks.API[kind]
        items = self._list(
            f"list {plural} in {namespace}",
            self.custom.list_namespaced_custom_object,
            group,
            version,
            namespace,
            plural,
            label_selector=selector,
        )["items"]
        for item in items:  # a list's items name their kind; said again, to be sure
            item.setdefault("kind", kind)
        return items

    def _framework_views(self) -> list[Obj]:
        """This install's admitted PyTorchJobs and RayJobs in every team namespace, as Jobs
        (frameworks.job_view): the watcher's copy of a kind it follows, else listed, only for
        the kinds the cluster serves. A namespace where they cannot be read is unseen
        (unseen_namespaces: its jobs are left as they are), and said."""
        views: list[Obj] = []
        unseen: set[str] = set()
        watched = self.store.watched if self.store.live else frozenset()
        namespaces = [ns for ns in self.namespaces() if ns not in self.refused]
        for kind in frameworks.KINDS:
            if not any(k == kind for k, _ in watched) and not self.serves(kind):
                continue
            copied = self._copied(watched, {kind})
            for namespace in namespaces:
                if (kind, namespace) in watched:  # followed: no LIST per pass
                    views += [
                        frameworks.job_view(obj)
                        for obj in copied.get(namespace, ())
                        if mf.selected(obj, self.selector)
                    ]
                    continue
                try:
                    found = self._list_framework(kind, namespace, self.selector)
                except ClusterError as exc:
                    if exc.transient:
                        raise
                    log.warning("%ss in %s cannot be read: %s", kind, namespace, exc)
                    unseen.add(namespace)
                    continue
                views += [frameworks.job_view(obj) for obj in found]
        self._unseen_frameworks = frozenset(unseen)
        return views

    def _copied(
        self, watched: Collection[tuple[str, str]], kinds: Collection[str]
    ) -> dict[str, list[Obj]]:
        """The watcher's copy of the queue-labelled `kinds` it follows, by namespace."""
        copied: dict[str, list[Obj]] = {}
        for kind in kinds:
            if any(k == kind for k, _ in watched):
                for obj in self.store.items(kind):
                    copied.setdefault(_namespace(obj), []).append(obj)
        return copied

    def _ours(self, jobs: list[Obj], pods: list[Obj]) -> Ours:
        """The Jobs and pods this install proves it made, against the database's records of
        the attempts their labels name (labels only say which records to read; pods' too, for
        the terminating pods of a Job already deleted)."""
        job_ids = {key[0] for obj in (*jobs, *pods) if (key := mf.attempt_of(obj)) is not None}
        return sort_out(jobs, pods, self.records(job_ids, self.instance))

    def list_nodes(self, live: Collection[tuple[int, int]] | None = None) -> list[NodeInfo]:
        """Every node; GPUs held by pods this install cannot prove it made count as used by
        others, whatever their labels say."""
        nodes, pods, jobs = self._current()
        self._remember_nodes(nodes)
        self.serves_pod_groups()  # asked at the first pass, for /healthz
        ours = self._ours(jobs, pods)
        # observe() in the same pass reads the same copy: one copy of the pods and one
        # sorting out per pass, not one per call.
        self._seen = (pods, ours)
        infos = inventory(nodes, pods, live, ours.pod_keys)
        if flavors := self.dra_flavors():
            slices, classes, claims = self._list_dra()
            use = dra_use(flavors, slices, classes, claims, pods, live, ours.pod_keys)
            infos = [with_dra(info, use) for info in infos]
        return infos

    def serves_pod_groups(self) -> bool:
        """Whether the API serves scheduling.k8s.io/v1beta1 PodGroups (Kubernetes 1.37 with
        the Workload API on), asked once per process through discovery and reported on
        /healthz. An API that cannot be asked now is asked again next time."""
        if self._pod_groups is None:
            try:
                found = _json(
                    self.call(
                        "discover scheduling.k8s.io/v1beta1",
                        self.scheduling.get_api_resources,
                        _preload_content=False,
                        _request_timeout=self.timeout,
                    )
                )
                names = {r.get("name") for r in found.get("resources") or []}
                self._pod_groups = "podgroups" in names
            except NotFound:
                self._pod_groups = False
            except ClusterError as exc:
                log.warning("cannot tell whether the cluster serves PodGroups: %s", exc)
                return False
            from gpuqueue.core.cluster_health import record_features

            record_features({"pod_groups": self._pod_groups})
            if self._pod_groups:
                log.info("the cluster serves PodGroups: each gang carries one")
        return self._pod_groups

    def _device_room(
        self, pods: list[Obj], ours: Ours
    ) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
        """DRA flavors' devices by node for the placement gate: those others' claims leave, and
        of those held, the ones coming back (dra.gate_room). gpuqueue's workers that carry
        their devices (gates.dra_devices) are counted by the gate itself."""
        flavors = self.dra_flavors()
        if not flavors:
            return {}, {}
        by_key = {
            (str(p["metadata"].get("namespace", "")), str(p["metadata"]["name"])): p for p in pods
        }
        counted = {key for key in ours.pod_keys if key in by_key and dra_devices(by_key[key])}
        slices, classes, claims = self._list_dra()
        return gate_room(flavors, slices, classes, claims, pods, counted)

    def _list_dra(self) -> tuple[list[Obj], list[Obj], list[Obj]]:
        """ResourceSlices, DeviceClasses and ResourceClaims (resource.k8s.io/v1), listed only
        while a flavor is DRA's. A cluster that does not serve the API offers no devices."""
        try:
            return (
                self._list("list resourceslices", self.resource.list_resource_slice)["items"],
                self._list("list deviceclasses", self.resource.list_device_class)["items"],
                self._list(
                    "list resourceclaims", self.resource.list_resource_claim_for_all_namespaces
                )["items"],
            )
        except NotFound as exc:
            log.warning("DRA flavors, but the cluster serves no resource.k8s.io/v1: %s", exc)
            return [], [], []

    def _remember_nodes(self, nodes: list[Obj]) -> None:
        self._nodes_seen = nodes
        for node in nodes:
            meta = node.get("metadata") or {}
            labels = meta.get("labels") or {}
            self._hostnames[meta["name"]] = str(labels.get("kubernetes.io/hostname", meta["name"]))
        self._not_ready = {n["metadata"]["name"]: not_ready_since(n) for n in nodes}

    def observe(self) -> list[WorkloadStatus]:
        """The phase of every workload this install proves it made (gpuqueue.cluster.proof):
        anything else labelled as gpuqueue's is ignored, and said once. A gang whose pods the
        API refused (FailedCreate events of its Job) or that release_gangs() held back is a
        failed start."""
        if self._seen is None or self._not_ready is None:
            # sync_cluster lists just before (list_nodes); otherwise read now.
            nodes, pods, jobs = self._current()
            self._remember_nodes(nodes)
            ours = self._ours(jobs, pods)
        else:
            (pods, ours), self._seen = self._seen, None
        for job, why in ours.unproven:
            meta = job.get("metadata") or {}
            if (uid := _uid(job)) not in self._unproven_told:
                self._unproven_told.add(uid)
                log.warning(
                    "Job %s/%s is labelled as gpuqueue's but is not this install's: %s; it is"
                    " ignored, and gpuqueue will not delete it",
                    meta.get("namespace"),
                    meta.get("name"),
                    why,
                )
        now = self.clock()
        for key in ours.jobs:
            self._first_seen.setdefault(key, now)
        self._observed = (self._nodes_seen, pods, ours)
        # A hold counts once, and only for a gang still behind its gate now: the hold is from
        # the last release_gangs(), which may be older than this read (another process may have
        # released the gang since), and a gang that started is no failed start.
        held, self._held = self._held, {}
        still_gated = {key for key, gang in ours.pods.items() if any(map(is_gated, gang))}
        problems = {
            **self._refusals(ours, now),
            **{key: why for key, why in held.items() if key in still_gated},
        }
        return workload_statuses(
            ours.jobs,
            ours.pods,
            self._not_ready or {},
            now,
            self.pull_timeout,
            self._first_seen,
            node_lost_grace=self.node_lost_grace,
            start_problems=problems,
        )

    def unseen_namespaces(self) -> Collection[str]:
        """Namespaces whose Jobs cannot be read now, and those another install holds."""
        return self._unseen | self._unseen_frameworks | frozenset(self.refused)

    def _refusals(self, ours: Ours, now: datetime) -> dict[Key, str]:
        """Why the API refused the pods of Jobs that still lack some after REFUSAL_CHECK: the
        Job controller's FailedCreate events that say the API will refuse them again
        (status.is_permanent_refusal: a ResourceQuota, Pod Security, a policy or webhook that
        denied them), not one that failed by chance (a conflict, a timeout). One
        LIST of those events per namespace that has such a Job, at most every REFUSAL_CHECK."""
        short: dict[str, dict[str, Key]] = defaultdict(dict)  # namespace -> {job uid: attempt}
        for key, job in ours.jobs.items():
            meta = job.get("metadata") or {}
            created = parse_time(meta.get("creationTimestamp")) or now
            workers = int((job.get("spec") or {}).get("parallelism") or 0)
            if (
                len(ours.pods.get(key, ())) < workers
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
                message = str(event.get("message") or "").removeprefix("Error creating: ")
                # A refusal by chance (a quota update conflict, a webhook timeout) is retried
                # by the Job controller: only one the API will repeat is a failed start.
                if key is not None and is_permanent_refusal(message):
                    found[key] = self._refused[key] = f"pods refused: {message}"
        return found

    def release_gangs(self) -> int:
        """Release every gated gang whose pods all exist and whose planned nodes have room,
        each pod to its planned node (gpuqueue.cluster.gates); remember the gangs held back
        for the next observe(). Returns how many pods were released."""
        if self.store.live:
            if not any(map(is_gated, self.store.items("pods"))):
                self._held = {}  # nothing waits behind the gate: nothing to read or prove
                return 0
            nodes, pods, jobs = self._current()
            ours = self._ours(jobs, pods)
        elif self._observed is not None:
            nodes, pods, ours = self._observed
        else:
            return 0
        out, self._held = releases(ours.jobs, ours.pods, pods, nodes, self._device_room(pods, ours))
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

    def claim(self, namespaces: Collection[str], *, strict: bool = False) -> dict[str, str]:
        """Make this install the owner of each team namespace, by the marker ConfigMap MARKER
        there, which names the install (its instance and the uid of its database): absent,
        it is created naming this install. A namespace whose marker names another install,
        or whose marker name someone else took, is refused: left out of this install for the
        process's life (neither watched nor launched in) and said. Returns {namespace: why}
        for the refused ones among `namespaces`; with `strict` (a launch) a refusal raises
        Claimed, and so does any other failure to claim (missing namespace, no RoleBinding),
        which otherwise is logged and tried again later."""
        for namespace in sorted(set(namespaces) - self._claimed - set(self.refused)):
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": MARKER,
                    "namespace": namespace,
                    "labels": {
                        mf.MANAGED_BY: mf.MANAGED_BY_VALUE,
                        mf.LABEL_INSTANCE: self.instance,
                    },
                },
                "data": {"instance": self.instance, "install": self.install},
            }
            try:
                try:
                    self._create(
                        "configmap", self.core.create_namespaced_config_map, namespace, body
                    )
                except Conflict:
                    marker = self._read(
                        "configmap", self.core.read_namespaced_config_map, namespace, MARKER
                    )
                    if why := marker_refusal(marker, namespace, self.instance, self.install):
                        log.error("%s", why)
                        self.refused[namespace] = why
                        continue
            except ClusterError as exc:
                if exc.transient or strict:
                    raise
                log.warning("namespace %s is not claimed for this install yet: %s", namespace, exc)
                continue
            self._claimed.add(namespace)
        refused = {ns: self.refused[ns] for ns in sorted(set(namespaces)) if ns in self.refused}
        if strict and refused:
            raise Claimed(next(iter(refused.values())))
        return refused

    def launch(self, spec: LaunchSpec) -> Launched:
        """Create the attempt's Secret, then its Service (for more than one worker) and Job
        owned by the Secret; what is
        already there is adopted only if it carries the attempt's proof, so launching twice is
        harmless, and a launch cut short is completed by the next sync (no Job yet: it
        launches again). Returns the token in the Secret and the uids of the Secret and the
        Job, for the caller to record. Safe to call from several threads at once.

        1. The namespace must be this install's (`claim`); name the planned nodes by their
           hostname label, for the plan the pods carry.
        2. The token Secret: a new token, or the one an earlier launch of this attempt stored
           there (returned either way, for the caller to keep its hash). It owns the other
           two, so deleting it removes everything of the attempt.
        3. The headless Service (a gang's: one worker has no one to find), the gang's
           PodDisruptionBudget (with GPUQUEUE_K8S_GANG_PDB), the gang's PodGroup where the
           cluster serves them (serves_pod_groups), a DRA flavor's ResourceClaimTemplate (each
           worker's claim for its devices), then the Indexed Job, whose pods (a gang's) wait
           behind the placement gate until the watcher
           releases the gang (release_gangs).
        4. Anything under the attempt's names that is not gpuqueue's (no proof: someone made
           it to be adopted) is neither adopted nor deleted: Squatted, a failed start. What
           this launch made goes, as it does when the API refuses the Job.
        """
        key = (spec.job_id, spec.attempt)
        # 1.
        self.claim([spec.namespace], strict=True)
        self._first_seen.setdefault(key, self.clock())
        if any(n not in self._hostnames for n in spec.placement):
            self._remember_nodes(self.list_raw_nodes()["items"])
        hostnames = {n: self._hostnames.get(n, n) for n in spec.placement}
        if spec.source and spec.source_kind in frameworks.KINDS:
            return self._admit_framework(spec, hostnames)
        if spec.source:
            return self._admit_source(spec, hostnames)
        record = Record(namespace=spec.namespace, proof=spec.proof)
        options = replace(self.options, pod_group=self.serves_pod_groups())
        # 2. (and 4. for the Secret)
        token, owner = self._token_secret(spec)
        secret_uid = _uid(owner)
        # 3.
        name = mf.workload_name(*key)
        # (kind, create, read, body, whether an object found under the name is ours)
        steps: list[tuple[str, Any, Any, dict[str, Any], Any]] = []
        if mf.has_service(spec):
            steps.append(
                (
                    "service",
                    self.core.create_namespaced_service,
                    self.core.read_namespaced_service,
                    mf.service_manifest(spec, owner),
                    lambda obj: proof.is_our_service(obj, key, record, secret_uid),
                )
            )
        if self.options.gang_pdb:
            steps.append(
                (
                    "poddisruptionbudget",
                    self.policy.create_namespaced_pod_disruption_budget,
                    self.policy.read_namespaced_pod_disruption_budget,
                    mf.pdb_manifest(spec, owner),
                    # Proven as the Service is: its name, the attempt's HMAC, owned by the
                    # attempt's Secret.
                    lambda obj: proof.is_our_service(obj, key, record, secret_uid),
                )
            )
        if options.pod_group:
            steps.append(
                (
                    "podgroup",
                    self.scheduling.create_namespaced_pod_group,
                    self.scheduling.read_namespaced_pod_group,
                    mf.pod_group_manifest(spec, owner),
                    lambda obj: proof.is_our_pod_group(obj, key, record, secret_uid),
                )
            )
        if spec.device_class and not spec.shared_claim:
            steps.append(
                (
                    "resourceclaimtemplate",
                    self.resource.create_namespaced_resource_claim_template,
                    self.resource.read_namespaced_resource_claim_template,
                    mf.claim_template_manifest(spec, owner),
                    lambda obj: proof.is_our_claim_template(obj, key, record, secret_uid),
                )
            )
        steps.append(
            (
                "job",
                self.batch.create_namespaced_job,
                self.batch.read_namespaced_job,
                mf.job_manifest(spec, options, hostnames, owner),
                lambda obj: proof.is_our_job(obj, key, record, secret_uid),
            )
        )
        made: dict[str, str] = {}
        try:
            if spec.device_class and spec.shared_claim:
                # A fraction of a shared DRA GPU: the claim its GPU's sharers share.
                made["resourceclaim"] = _uid(shared_claims.join(self, spec, owner))
            for kind, create, read, body, ours in steps:
                try:
                    obj = self._create(kind, create, spec.namespace, body)
                except Conflict:
                    obj = self._read(kind, read, spec.namespace, body["metadata"]["name"])
                    if not ours(obj):  # 4.
                        raise Squatted(_squatted(kind.title(), spec.namespace, name)) from None
                    log.info(
                        "%s %s/%s exists and carries its proof: adopted", kind, spec.namespace, name
                    )
                made[kind] = _uid(obj)
        except ClusterError as exc:
            if not exc.transient:
                self._delete(
                    "secret",
                    self.core.delete_namespaced_secret,
                    spec.namespace,
                    mf.token_secret_name(*key),
                    secret_uid,
                )
            raise
        return Launched(token=token, secret_uid=secret_uid, job_uid=made.get("job", ""))

    def _token_secret(self, spec: LaunchSpec, owner: Obj | None = None) -> tuple[str, Obj]:
        """The attempt's token Secret and the token in it: a new one, or the one an earlier
        launch of this attempt made (adopted only with the attempt's proof, else Squatted).
        `owner`: the user's object it goes with, for an attempt that admits one."""
        key = (spec.job_id, spec.attempt)
        token = f"gqj_{spec.job_id}_{secrets.token_urlsafe(32)}"
        name = mf.token_secret_name(*key)
        try:
            secret = self._create(
                "secret",
                self.core.create_namespaced_secret,
                spec.namespace,
                mf.secret_manifest(spec, token, owner),
            )
        except Conflict:
            secret = self._read("secret", self.core.read_namespaced_secret, spec.namespace, name)
            if not proof.is_our_secret(secret, key, Record(spec.namespace, proof=spec.proof)):
                raise Squatted(_squatted("Secret", spec.namespace, name)) from None
            token = _token_in(secret) or token
        return token, secret

    def _admit_source(self, spec: LaunchSpec, hostnames: Mapping[str, str]) -> Launched:
        """Admit the user's suspended Job the job mirrors (gpuqueue.cluster.sources): the plan,
        gpuqueue's labels and the placement gate into its pod template, and `suspend: false`,
        in one compare-and-swap update. Only the Job recorded when it was mirrored (its name
        and uid) is touched. Already admitted as this attempt is success (a relaunch).
        Nothing else is made: no Secret, so the workload gets no checkpoint token (its
        preemption waits out the grace period)."""
        key = (spec.job_id, spec.attempt)
        for _ in range(3):
            job = self._get("job", self.batch.read_namespaced_job, spec.namespace, spec.source)
            if job is None or _uid(job) != spec.source_uid:
                # Deleted (or replaced under its name): the sync cancels the job.
                raise ClusterError(f"Job {spec.namespace}/{spec.source} is gone", transient=True)
            if not sources.is_suspended(job):
                if mf.attempt_of(job) == key:
                    return Launched(token=secrets.token_urlsafe(32), job_uid=spec.source_uid)
                raise ClusterError(
                    f"Job {spec.namespace}/{spec.source} still runs its previous attempt",
                    transient=True,
                )
            if (job.get("status") or {}).get("startTime"):
                # Stopped by a preemption: its pod template may change only without a start
                # time (Kubernetes' rule), which the Job controller leaves; clear it (as the
                # stop does, in case that was cut short) and read the Job again.
                self._clear_start_time(spec.namespace, spec.source)
                continue
            patch = sources.admission_patch(job, spec, self.options, hostnames)
            try:
                self.call(
                    f"admit job {spec.namespace}/{spec.source}",
                    self.batch.patch_namespaced_job,
                    spec.source,
                    spec.namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
            except Conflict:
                continue  # changed since it was read: read it again
            except NotFound:
                raise ClusterError(
                    f"Job {spec.namespace}/{spec.source} is gone", transient=True
                ) from None
            # No token is handed out: the hash kept is of one nobody holds.
            return Launched(token=secrets.token_urlsafe(32), job_uid=spec.source_uid)
        raise ClusterError(f"Job {spec.namespace}/{spec.source} keeps changing", transient=True)

    def _read_framework(self, kind: str, namespace: str, name: str) -> Obj | None:
        group, version, plural = frameworks.API[kind]
        try:
            response = self.call(
                f"read {kind} {namespace}/{name}",
                self.custom.get_namespaced_custom_object,
                group,
                version,
                namespace,
                plural,
                name,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except NotFound:
            return None
        obj = _json(response)
        obj.setdefault("kind", kind)
        return obj

    def _patch_framework(self, kind: str, namespace: str, name: str, patch: Obj) -> None:
        group, version, plural = frameworks.API[kind]
        self.call(
            f"patch {kind} {namespace}/{name}",
            self.custom.patch_namespaced_custom_object,
            group,
            version,
            namespace,
            plural,
            name,
            patch,
            _content_type="application/merge-patch+json",
            _preload_content=False,
            _request_timeout=self.timeout,
        )

    def _admit_framework(self, spec: LaunchSpec, hostnames: Mapping[str, str]) -> Launched:
        """Admit the user's suspended PyTorchJob or RayJob the job mirrors, as _admit_source
        admits a Job: every pod template patched with the plan, the gate and the checkpoint
        protocol, and unsuspended, in one compare-and-swap
        (gpuqueue.cluster.frameworks.admission_patch). Only the object recorded when it was
        mirrored (its kind, name and uid) is touched. The attempt's token Secret is made
        first, owned by the object (it goes with it); its token is returned for the caller
        to keep its hash, as for gpuqueue's own Jobs. (A CRD's pod templates may change while
        it is suspended; a batch Job's may not gain variables or volumes, so a labelled Job
        gets no token.)"""
        key, kind, what = (spec.job_id, spec.attempt), spec.source_kind, spec.source
        for _ in range(3):
            obj = self._read_framework(kind, spec.namespace, what)
            if obj is None or _uid(obj) != spec.source_uid:
                raise ClusterError(f"{kind} {spec.namespace}/{what} is gone", transient=True)
            if not frameworks.is_suspended(obj):
                if mf.attempt_of(obj) == key:
                    token, secret = self._token_secret(spec, obj)
                    return Launched(token, secret_uid=_uid(secret), job_uid=spec.source_uid)
                raise ClusterError(
                    f"{kind} {spec.namespace}/{what} still runs its previous attempt",
                    transient=True,
                )
            if kind == frameworks.KIND_RAY and (obj.get("status") or {}).get(
                "jobDeploymentStatus"
            ) not in (None, "", "Suspended", "New"):
                # KubeRay still tears down the previous attempt's RayCluster (Suspending).
                raise ClusterError(
                    f"{kind} {spec.namespace}/{what} is still suspending", transient=True
                )
            token, secret = self._token_secret(spec, obj)
            patch = frameworks.admission_patch(obj, spec, self.options, hostnames)
            try:
                self._patch_framework(kind, spec.namespace, what, patch)
            except Conflict:
                continue
            except NotFound:
                raise ClusterError(
                    f"{kind} {spec.namespace}/{what} is gone", transient=True
                ) from None
            return Launched(token, secret_uid=_uid(secret), job_uid=spec.source_uid)
        raise ClusterError(f"{kind} {spec.namespace}/{what} keeps changing", transient=True)

    def _stop_framework(self, record: Record, key: Key) -> None:
        """Stop the user's PyTorchJob or RayJob as _stop_source stops a Job: suspend it (its
        operator deletes its pods), and delete it when the job was cancelled. The attempt's
        token Secret goes either way (proven gpuqueue's, by its recorded uid)."""
        kind, namespace, name = record.source_kind, record.namespace, record.source
        secret_name = mf.token_secret_name(*key)
        secret = self._get("secret", self.core.read_namespaced_secret, namespace, secret_name)
        if secret is not None and proof.is_our_secret(secret, key, record):
            self._delete(
                "secret", self.core.delete_namespaced_secret, namespace, secret_name, _uid(secret)
            )
        obj = self._read_framework(kind, namespace, name)
        if obj is None or _uid(obj) != record.job_uid:
            return
        if mf.attempt_of(obj) != key and not record.cancelled:
            return
        if not frameworks.is_suspended(obj) and not frameworks.is_finished(obj):
            with contextlib.suppress(NotFound):
                self._patch_framework(kind, namespace, name, frameworks.suspend_patch(obj))
        if record.cancelled:
            group, version, plural = frameworks.API[kind]
            with contextlib.suppress(NotFound, Conflict):
                self.call(
                    f"delete {kind} {namespace}/{name}",
                    self.custom.delete_namespaced_custom_object,
                    group,
                    version,
                    namespace,
                    plural,
                    name,
                    body={
                        "preconditions": {"uid": record.job_uid},
                        "propagationPolicy": "Background",
                    },
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )

    def _stop_source(self, record: Record, key: Key) -> None:
        """Stop the user's Job an attempt admitted: suspend it (the Job controller deletes its
        pods; the job waits in the queue again), and when the job was cancelled, delete it
        too. Only the Job recorded when it was mirrored, and only while it is still this
        attempt's and unfinished: a finished Job, or one already back in the queue, is the
        user's to keep."""
        namespace, name = record.namespace, record.source
        job = self._get("job", self.batch.read_namespaced_job, namespace, name)
        if job is None or _uid(job) != record.job_uid:
            return
        if mf.attempt_of(job) != key and not record.cancelled:
            return  # already admitted again as a later attempt
        if not sources.is_suspended(job) and not sources.is_finished(job):
            with contextlib.suppress(NotFound):
                self.call(
                    f"suspend job {namespace}/{name}",
                    self.batch.patch_namespaced_job,
                    name,
                    namespace,
                    {"spec": {"suspend": True}},
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
        if record.cancelled:
            self._delete("job", self.batch.delete_namespaced_job, namespace, name, record.job_uid)
        else:
            self._clear_start_time(namespace, name)

    def _clear_start_time(self, namespace: str, name: str) -> None:
        """Take the start time off a suspended Job's status, so that its next admission may
        write its pod template (Kubernetes allows that only to a suspended Job without one;
        the Job controller sets it on every start and never clears it). Kueue does the same."""
        with contextlib.suppress(NotFound):
            self.call(
                f"clear the start time of job {namespace}/{name}",
                self.batch.patch_namespaced_job_status,
                name,
                namespace,
                {"status": {"startTime": None}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=self.timeout,
            )

    def list_sources(self) -> list[Obj]:
        """The Jobs, PyTorchJobs and RayJobs labelled with a queue in every team namespace
        this install claimed: from the watcher's copy of the kinds it follows, else listed; a
        namespace that cannot be read is left out (unseen_source_namespaces)."""
        found: list[Obj] = []
        unseen: set[str] = set()
        namespaces = [ns for ns in self.namespaces() if ns not in self.refused]
        self.claim(namespaces)
        # What the watcher follows in a namespace comes from its copy (and its unseen
        # namespaces); the rest is listed there.
        followed = self.store.watched if self.store.live else frozenset()
        copied = self._copied(followed, {k for k, _ in followed})
        if followed:
            unseen |= self.store.unseen_sources
        for namespace in namespaces:
            if namespace not in self._claimed:
                unseen.add(namespace)
                continue
            try:
                listed = list(copied.get(namespace, ()))
                if (QUEUED, namespace) not in followed:
                    listed += self._list(
                        f"list queued jobs in {namespace}",
                        self.batch.list_namespaced_job,
                        namespace,
                        label_selector=sources.QUEUE_LABEL,
                    )["items"]
                for kind in frameworks.KINDS:
                    if (kind, namespace) not in followed and self.serves(kind):
                        listed += self._list_framework(kind, namespace, sources.QUEUE_LABEL)
                found += [
                    job
                    for job in listed
                    if sources.QUEUE_LABEL in ((job.get("metadata") or {}).get("labels") or {})
                ]
            except ClusterError as exc:
                if exc.transient:
                    raise
                log.warning("queued jobs in %s cannot be read: %s", namespace, exc)
                unseen.add(namespace)
        self._unseen_sources = frozenset(unseen)
        return found

    def unseen_source_namespaces(self) -> Collection[str]:
        return self._unseen_sources

    def describe_source(
        self, namespace: str, name: str, uid: str, job_id: int | None, text: str, kind: str = ""
    ) -> None:
        """The status annotation on the Job (only while it is still the one with `uid`), and
        an Event on it with the same sentence: `kubectl describe job` shows both."""
        if job_id is not None:
            patch = sources.status_patch(job_id, text)
        else:
            patch = sources.refusal_patch(text)
        patch["metadata"]["uid"] = uid  # a precondition: another Job under the name is refused
        kind = kind or sources.KIND_JOB
        try:
            if kind in frameworks.KINDS:
                self._patch_framework(kind, namespace, name, patch)
            else:
                self.call(
                    f"describe job {namespace}/{name}",
                    self.batch.patch_namespaced_job,
                    name,
                    namespace,
                    patch,
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
        except (NotFound, Conflict, ClusterError) as exc:  # gone, replaced, or the API away
            log.info("job %s/%s not described: %s", namespace, name, exc)
            return
        now = self.clock()
        event = {
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": (
                    "/".join(frameworks.API[kind][:2]) if kind in frameworks.KINDS else "batch/v1"
                ),
                "kind": kind,
                "name": name,
                "namespace": namespace,
                "uid": uid,
            },
            "reason": "Queued" if job_id is not None else "NotQueued",
            "message": text[:1024],
            "type": "Normal" if job_id is not None else "Warning",
            "source": {"component": "gpuqueue"},
            "firstTimestamp": mf.rfc3339(now),
            "lastTimestamp": mf.rfc3339(now),
            "count": 1,
        }
        with contextlib.suppress(ClusterError):
            self.call(
                f"event on job {namespace}/{name}",
                self.core.create_namespaced_event,
                namespace,
                event,
                _preload_content=False,
                _request_timeout=self.timeout,
            )

    def _read(self, kind: str, fn: Callable[..., Any], namespace: str, name: str) -> Obj:
        """An object a create just found (409); gone meanwhile (deleted between the two calls)
        is transient: the next sync launches again."""
        obj = self._get(kind, fn, namespace, name)
        if obj is None:
            raise ClusterError(f"{kind} {namespace}/{name} was deleted meanwhile", transient=True)
        return obj

    def _get(self, kind: str, fn: Callable[..., Any], namespace: str, name: str) -> Obj | None:
        """One object, or None when it does not exist."""
        try:
            response = self.call(
                f"read {kind} {namespace}/{name}",
                fn,
                name,
                namespace,
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except NotFound:
            return None
        return _json(response)

    def _delete(
        self, kind: str, fn: Callable[..., Any], namespace: str, name: str, uid: str
    ) -> None:
        """Delete the object of that name only if it still is the one with `uid` (a
        precondition the API checks): gone, or replaced meanwhile, is left alone."""
        if not uid:
            return
        body = client.V1DeleteOptions(
            propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid)
        )
        with contextlib.suppress(NotFound, Conflict):
            self.call(
                f"delete {kind} {namespace}/{name}",
                fn,
                name,
                namespace,
                body=body,
                _preload_content=False,
                _request_timeout=self.timeout,
            )

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
        self._set_checkpoint_request(job_id, attempt, deadline)

    def withdraw_checkpoint(self, job_id: int, attempt: int) -> None:
        """Take the request off every pod of the attempt: the workload's file no longer names a
        deadline, and it goes on running. A pod without the request is left alone."""
        self._set_checkpoint_request(job_id, attempt, None)

    def _set_checkpoint_request(self, job_id: int, attempt: int, deadline: datetime | None) -> None:
        """The checkpoint annotation of every pod of the attempt set to `deadline`, or removed
        (None); a pod that already carries what is wanted is left alone."""
        patch = mf.checkpoint_patch(deadline)
        wanted = patch["metadata"]["annotations"][mf.CHECKPOINT_ANNOTATION]
        for pod in self._pods_of(job_id, attempt):
            meta = pod["metadata"]
            if (meta.get("annotations") or {}).get(mf.CHECKPOINT_ANNOTATION) == wanted:
                continue
            try:
                self.call(
                    f"set the checkpoint request of pod {meta.get('namespace')}/{meta['name']}",
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
        """The attempt's pods that gpuqueue proves it made: their controller is the attempt's
        Job, in the namespace recorded for it. Without the watcher's copy, by the Job uid
        recorded at launch, so that only pods are read (the web's account may read nothing
        else); an attempt whose launch has not recorded it yet has no worker to show."""
        key = (job_id, attempt)
        if self.store.live:
            jobs = self.store.items("jobs") + self._framework_views()
            ours = self._ours(jobs, self.store.items("pods"))
            return list(ours.pods.get(key, ()))
        record = self.records([job_id], self.instance).get(key)
        if record is None or not record.job_uid:
            return []
        pods = self._list(
            f"list pods in {record.namespace}",
            self.core.list_namespaced_pod,
            record.namespace,
            label_selector=mf.attempt_selector(job_id, attempt, self.instance),
            call=call,
            shape=projector("pods"),
        )["items"]
        ray = record.source if record.source_kind == frameworks.KIND_RAY else ""
        return [p for p in pods if proof.is_worker(p, key, record.namespace, record.job_uid, ray)]

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
        """Delete the attempt's Job (its pods get SIGTERM and their grace period), Service and
        Secret, each only if gpuqueue proves it made it (in the namespace recorded for the
        attempt, with the uid recorded, or the attempt's proof) and only while it still is
        that object (a uid precondition). Whatever is gone is fine; whatever is not
        gpuqueue's is left alone, and said."""
        key = (job_id, attempt)
        self._first_seen.pop(key, None)
        record = self.records([job_id], self.instance).get(key)
        if record is None:
            log.warning(
                "stop of attempt %s of job %s: the database has no record of launching it;"
                " nothing is deleted",
                attempt,
                job_id,
            )
            return
        if record.source and record.source_kind in frameworks.KINDS:
            self._stop_framework(record, key)
            return
        if record.source:
            self._stop_source(record, key)
            return
        namespace, name = record.namespace, mf.workload_name(*key)
        secret_name = mf.token_secret_name(*key)
        secret = self._get("secret", self.core.read_namespaced_secret, namespace, secret_name)
        if secret is not None and not proof.is_our_secret(secret, key, record):
            log.warning("secret %s/%s is not gpuqueue's: left alone", namespace, secret_name)
            secret = None
        secret_uid = record.secret_uid or (_uid(secret) if secret is not None else "")
        job = self._get("job", self.batch.read_namespaced_job, namespace, name)
        if job is not None and proof.is_our_job(job, key, record, secret_uid):
            self._delete("job", self.batch.delete_namespaced_job, namespace, name, _uid(job))
        elif job is not None:
            log.warning("job %s/%s is not gpuqueue's: left alone", namespace, name)
        if secret_uid:
            service = self._get("service", self.core.read_namespaced_service, namespace, name)
            if service is not None and proof.is_our_service(service, key, record, secret_uid):
                self._delete(
                    "service", self.core.delete_namespaced_service, namespace, name, _uid(service)
                )
            # A DRA flavor's claim template (its Secret's garbage collection removes it
            # too; deleted here at once, and only when proven gpuqueue's).
            template_name = mf.claim_template_name(*key)
            template = (
                self._get(
                    "resourceclaimtemplate",
                    self.resource.read_namespaced_resource_claim_template,
                    namespace,
                    template_name,
                )
                if self.dra_flavors()
                else None
            )
            if template is not None and proof.is_our_claim_template(
                template, key, record, secret_uid
            ):
                self._delete(
                    "resourceclaimtemplate",
                    self.resource.delete_namespaced_resource_claim_template,
                    namespace,
                    template_name,
                    _uid(template),
                )
            elif template is not None:
                log.warning(
                    "resourceclaimtemplate %s/%s is not gpuqueue's: left alone",
                    namespace,
                    template_name,
                )
            if self.dra_flavors():
                # The shared claims of a fraction's GPU: off them, and the last one out
                # deletes it.
                shared_claims.leave(self, namespace, secret_uid)
        if secret is not None:
            self._delete(
                "secret", self.core.delete_namespaced_secret, namespace, secret_name, _uid(secret)
            )

    # Watching ----------------------------------------------------------------------------

    def watch(
        self, should_stop: Callable[[], bool], sync: Callable[[], None], **timing: Any
    ) -> None:
        """Follow the cluster until `should_stop()`, calling `sync` after every change: see
        gpuqueue.cluster.k8s_watch.run_watcher (which takes `timing`)."""
        run_watcher(self, should_stop, sync, **timing)
