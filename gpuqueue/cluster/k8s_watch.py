"""The watcher: a live copy of nodes, pods, gpuqueue Jobs and the users' queue-labelled Jobs,
PyTorchJobs and RayJobs, and the sync loop that uses it.

Each resource is followed by list-then-watch: list once, remember the list's resourceVersion,
watch from it, keep the resourceVersion of every event (and bookmark) so that a dropped or
expired watch resumes where it stopped; a 410 Gone (that version is too old for the API
server) means the copy may have missed deletions, so the resource is listed afresh.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from gpuqueue.cluster import frameworks
from gpuqueue.cluster.base import Claimed, ClusterError
from gpuqueue.cluster.projection import SHAPES, projector
from gpuqueue.cluster.sources import QUEUE_LABEL

if TYPE_CHECKING:
    from gpuqueue.cluster.kubernetes import KubernetesBackend

log = logging.getLogger(__name__)
Obj = dict[str, Any]
KINDS = ("nodes", "pods", "jobs")
# The users' objects labelled with a queue, per team namespace: batch Jobs ("queued") and each
# framework kind the cluster serves (by its kind's name). Kept whole (but managedFields): the
# source sync reads their pod templates.
QUEUED = "queued"
# After an event, the watcher waits this long before its pass, so that a burst (a gang's pods
# created, bound and started, a node's pods evicted) is one pass, not one per event.
DEBOUNCE_SECONDS = 0.2


def without_managed_fields(obj: Obj) -> Obj:
    """Drop the server-side-apply bookkeeping, often the larger part of an object, that
    nothing in gpuqueue reads: for what is listed once (events), not kept; what the watcher
    keeps is cut down further (projection)."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def object_key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


class Store:
    """Objects by kind and (namespace, name), shared by the watch threads and the sync loop.

    A listing replaces the objects of its kind in its scope (a namespace, or all); `live` says
    that nodes and pods are listed and their watches healthy, so reads may use the copy;
    `unseen` names the team namespaces whose Jobs are not followed now (never listed, or their
    watch failing: a namespace without gpuqueue's RoleBinding answers 403).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {kind: {} for kind in KINDS}
        self.live = False
        self.unseen: frozenset[str] = frozenset()
        # The queue-labelled kinds followed, by (kind, namespace) (QUEUED, framework kinds):
        # readers take those from the copy while it is live, and list the others (a namespace
        # that appeared since the last resync); `unseen_sources` names the team namespaces
        # where one of them is followed but not healthy now.
        self.watched: frozenset[tuple[str, str]] = frozenset()
        self.unseen_sources: frozenset[str] = frozenset()

    def replace(self, kind: str, items: list[Obj], namespace: str | None = None) -> None:
        with self._lock:
            kept = {
                key: obj
                for key, obj in self._objects.get(kind, {}).items()
                if namespace is not None and key[0] != namespace
            }
            kept.update({object_key(obj): obj for obj in items})
            self._objects[kind] = kept

    def apply(self, kind: str, event_type: str, obj: Obj) -> None:
        with self._lock:
            objects = self._objects.setdefault(kind, {})
            if event_type == "DELETED":
                objects.pop(object_key(obj), None)
            else:  # ADDED, MODIFIED
                objects[object_key(obj)] = obj

    def items(self, kind: str) -> list[Obj]:
        """The objects of `kind`, in no particular order (every reader sorts what it needs:
        sorting every pod of a large cluster on each pass would cost more than the pass)."""
        with self._lock:
            return list(self._objects.get(kind, {}).values())


class ResourceWatch:
    """List-then-watch of one resource in one scope, in its own thread."""

    def __init__(
        self,
        backend: KubernetesBackend,
        kind: str,
        fn: Callable[..., Any],
        *args: Any,
        namespace: str | None = None,
        changed: threading.Event,
        watch_seconds: float,
        **kwargs: Any,
    ) -> None:
        self.backend, self.kind, self.fn, self.args, self.kwargs = backend, kind, fn, args, kwargs
        self.namespace = namespace
        # What of each object is kept: see projection; a queue-labelled object, all of it.
        self.shape = projector(kind) if kind in SHAPES else _labelled(kind)
        self.changed = changed
        self.watch_seconds = watch_seconds
        self.resource_version: str | None = None
        self.listed = threading.Event()
        self.lists = 0  # how many times it listed: once, plus once per 410 or resync
        self.stopping = False
        self.failing = False  # its last list or watch failed; cleared by the next that works
        self._relist = threading.Event()
        self.thread = threading.Thread(
            target=self._run, name=f"watch-{kind}-{namespace or 'all'}", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True

    def relist(self) -> None:
        """List afresh (a periodic resync against missed events): at the stream's next event or
        bookmark, or its renewal, whichever comes first."""
        self._relist.set()

    def _run(self) -> None:
        failures = 0
        while not self.stopping:
            try:
                if self.resource_version is None or self._relist.is_set():
                    self._relist.clear()
                    self._list()
                self._watch()
                failures = 0
            except ApiException as exc:
                if exc.status == 410:
                    log.info("watch of %s: 410 Gone, listing again", self.kind)
                    self.resource_version = None
                    continue
                failures += 1
                self._pause(failures, f"watch {self.kind}: HTTP {exc.status}")
            except ClusterError as exc:  # the list failed after its own retries
                failures += 1
                self._pause(failures, str(exc))
            except urllib3.exceptions.ReadTimeoutError:
                continue  # a quiet stream: renew it from the same resourceVersion
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                failures += 1
                self._pause(failures, f"watch {self.kind}: {type(exc).__name__}: {exc}")

    @property
    def healthy(self) -> bool:
        return self.listed.is_set() and not self.failing

    def _pause(self, failures: int, detail: str) -> None:
        self.failing = True
        log.warning("%s; retrying", detail)
        self.backend.call.on_health(False, detail)
        time.sleep(min(30.0, self.backend.call.backoff * 2 ** min(failures, 6)))

    def _list(self) -> None:
        listed = self.backend._list(
            f"list {self.kind}", self.fn, *self.args, shape=self.shape, **self.kwargs
        )
        self.backend.store.replace(self.kind, listed.get("items") or [], self.namespace)
        self.resource_version = (listed.get("metadata") or {}).get("resourceVersion") or ""
        self.failing = False
        self.lists += 1
        self.listed.set()
        self.changed.set()

    def _watch(self) -> None:
        """One watch request, until the server ends it, it times out, or we stop."""
        response = self.fn(
            *self.args,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version or None,
            timeout_seconds=max(1, int(self.watch_seconds)),
            _preload_content=False,
            # The server ends the watch after timeout_seconds; the read timeout covers servers
            # (and emulators) that do not, so that a quiet stream is renewed and stop is noticed.
            _request_timeout=(self.backend.timeout, self.watch_seconds + 5),
            **self.kwargs,
        )
        try:
            for line in iter_resp_lines(response):
                if self.stopping or self._relist.is_set():
                    return  # a relist replaces whatever this stream would still say
                if not line:
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise ApiException(status=obj.get("code"), reason=obj.get("message", ""))
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if event.get("type") != "BOOKMARK":
                    self.backend.store.apply(self.kind, event["type"], self.shape(obj))
                    self.changed.set()
                if version:
                    self.resource_version = version
        finally:
            response.close()
            response.release_conn()


def jobs_watch(
    backend: KubernetesBackend, namespace: str, changed: threading.Event, watch_seconds: float
) -> ResourceWatch:
    # Jobs are watched per team namespace: the RBAC grants them there, not cluster-wide.
    return ResourceWatch(
        backend,
        "jobs",
        backend.batch.list_namespaced_job,
        namespace,
        namespace=namespace,
        changed=changed,
        watch_seconds=watch_seconds,
        label_selector=backend.selector,  # this install's Jobs only
    )


def _labelled(kind: str) -> Callable[[Obj], Obj]:
    """A queue-labelled object as kept: without managedFields, naming its kind."""

    def cut(obj: Obj) -> Obj:
        obj = without_managed_fields(obj)
        obj.setdefault("kind", "Job" if kind == QUEUED else kind)
        return obj

    return cut


def labelled_watches(
    backend: KubernetesBackend,
    namespace: str,
    changed: threading.Event,
    watch_seconds: float,
    kinds: tuple[str, ...] = (QUEUED, *frameworks.KINDS),
) -> dict[str, ResourceWatch]:
    """The users' queue-labelled Jobs and, of `kinds`, the framework kinds the cluster serves,
    in one team namespace: what the source sync and the framework views read on every pass,
    which they would otherwise list there each time."""
    watches: dict[str, ResourceWatch] = {}
    for kind in kinds:
        if kind == QUEUED:
            fn: Callable[..., Any] = backend.batch.list_namespaced_job
            args: tuple[Any, ...] = (namespace,)
        elif backend.serves(kind):
            group, version, plural = frameworks.API[kind]
            fn = backend.custom.list_namespaced_custom_object
            args = (group, version, namespace, plural)
        else:
            continue
        watches[f"{kind}/{namespace}"] = ResourceWatch(
            backend,
            kind,
            fn,
            *args,
            namespace=namespace,
            changed=changed,
            watch_seconds=watch_seconds,
            label_selector=QUEUE_LABEL,
        )
    return watches


def start_watches(
    backend: KubernetesBackend,
    changed: threading.Event,
    namespaces: list[str],
    watch_seconds: float,
) -> dict[str, ResourceWatch]:
    watches = {
        "nodes": ResourceWatch(
            backend, "nodes", backend.core.list_node, changed=changed, watch_seconds=watch_seconds
        ),
        "pods": ResourceWatch(
            backend,
            "pods",
            backend.core.list_pod_for_all_namespaces,
            changed=changed,
            watch_seconds=watch_seconds,
        ),
    }
    for namespace in namespaces:
        watches[f"jobs/{namespace}"] = jobs_watch(backend, namespace, changed, watch_seconds)
        watches.update(labelled_watches(backend, namespace, changed, watch_seconds))
    for watch in watches.values():
        watch.start()
    return watches


def follow(store: Store, watches: dict[str, ResourceWatch]) -> None:
    """Tell the store's readers what they may read from the copy now (`run_watcher`, 1.)."""
    store.live = watches["nodes"].healthy and watches["pods"].healthy
    namespaced = [w for w in watches.values() if w.namespace is not None]
    # A framework kind's objects are Jobs too (frameworks.job_view): unseen with them.
    store.unseen = frozenset(
        w.namespace or "" for w in namespaced if w.kind != QUEUED and not w.healthy
    )
    store.unseen_sources = frozenset(
        w.namespace or "" for w in namespaced if w.kind != "jobs" and not w.healthy
    )
    store.watched = frozenset((w.kind, w.namespace or "") for w in namespaced if w.kind != "jobs")


def run_watcher(
    backend: KubernetesBackend,
    should_stop: Callable[[], bool],
    sync: Callable[[], None],
    *,
    sync_seconds: float,
    resync_seconds: float,
    watch_seconds: float,
    heartbeat: str = "",
    on_pass: Callable[[], None] | None = None,
    debounce_seconds: float = DEBOUNCE_SECONDS,
) -> None:
    """Follow the cluster until `should_stop()`, calling `sync()` (one pass of the cluster
    sync, which reads the backend's live copy; it handles its own failures).

    0. Claim every team namespace for this install (KubernetesBackend.claim). One whose
       marker names another install is left out (not watched; its jobs left as they are);
       when every team namespace is another's, the watcher refuses to start (Claimed).
    1. Start list-then-watch threads for nodes and pods (cluster-wide) and for gpuqueue Jobs in
       each team namespace; wait until nodes and pods have listed and each Jobs watch has
       listed or failed once, then serve reads from the copy. The users' queue-labelled
       Jobs, PyTorchJobs and RayJobs are followed the same way in each team namespace
       (`labelled_watches`). Before every pass the copy is live only while the node and pod
       watches are healthy, and the namespaces whose watches are not are left out of the pass
       (one namespace without its RoleBinding does not stop the others; `follow`).
    2. Reconcile at start: one full sync (relaunch admitted jobs without a Kubernetes Job,
       delete Jobs that belong to no live job, move every job to what the cluster says).
    3. Then sync again soon after anything changed (`debounce_seconds` after the first event,
       so that a burst of events is one pass), and at least every `sync_seconds` (the
       checkpoint deadline and the gang-ready timeout pass without any event).
    4. Every `resync_seconds`: re-list everything (against missed events) and pick up the
       namespaces of new teams (claimed first: one another install owns is left out, and
       said), and the framework kinds the cluster has come to serve.
    """
    changed = threading.Event()
    # 0. and 1.
    namespaces = backend.namespaces()
    if (refused := backend.claim(namespaces)) and not set(namespaces) - set(refused):
        raise Claimed(
            f"this gpuqueue install ({backend.instance!r}) refuses to start: every team"
            f" namespace belongs to another install. {' '.join(f'{w}.' for w in refused.values())}"
        )
    namespaces = [namespace for namespace in namespaces if namespace not in refused]
    watches = start_watches(backend, changed, namespaces, watch_seconds)
    try:
        while not all(
            w.listed.wait(0.1) or (w.namespace is not None and w.failing) for w in watches.values()
        ):
            if should_stop():
                return
        last_resync = time.monotonic()
        # 2. and 3.
        while not should_stop():
            changed.clear()
            follow(backend.store, watches)
            sync()
            if heartbeat:
                _touch(heartbeat)
            if on_pass is not None:
                on_pass()
            # 4.
            if time.monotonic() - last_resync >= resync_seconds:
                last_resync = time.monotonic()
                for watch in watches.values():
                    watch.relist()
                new = sorted(set(backend.namespaces()) - set(namespaces) - set(backend.refused))
                for namespace in new:
                    try:
                        if backend.claim([namespace]):
                            continue  # another install's: left out (claim said why)
                    except ClusterError as exc:  # the API away: tried again at the next resync
                        log.warning("namespace %s not claimed yet: %s", namespace, exc)
                        continue
                    namespaces.append(namespace)
                    watches[f"jobs/{namespace}"] = jobs_watch(
                        backend, namespace, changed, watch_seconds
                    )
                    watches[f"jobs/{namespace}"].start()
                # The framework kinds not followed yet (a CRD installed since), everywhere.
                for namespace in namespaces:
                    missing = tuple(
                        kind
                        for kind in (QUEUED, *frameworks.KINDS)
                        if f"{kind}/{namespace}" not in watches
                    )
                    if missing:
                        added = labelled_watches(
                            backend, namespace, changed, watch_seconds, missing
                        )
                        watches.update(added)
                        for watch in added.values():
                            watch.start()
            if changed.wait(sync_seconds) and debounce_seconds > 0:
                time.sleep(debounce_seconds)  # let the rest of a burst arrive first
    finally:
        backend.store.live = False
        for watch in watches.values():
            watch.stop()


def _touch(path: str) -> None:
    """The watcher Deployment's liveness probe checks that this file is fresh."""
    try:
        with open(path, "a"):
            pass
        os.utime(path)
    except OSError as exc:
        log.warning("cannot touch the heartbeat file %s: %s", path, exc)
