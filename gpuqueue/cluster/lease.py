"""Leader election on a coordination.k8s.io Lease: two replicas of a singleton, one acting.

The watcher and beat run two replicas each; only the one that holds the Lease in the release
namespace acts. The protocol is client-go's (`tools/leaderelection`):

1. A candidate reads the Lease. Absent: it creates it, holding it. Held by another whose record
   (holder, renewTime, duration) has not changed for `leaseDurationSeconds` of this candidate's
   own clock, or released (no holder): it writes itself as holder. Every write carries the
   resourceVersion it read, so of two candidates writing at once one gets 409 and follows.
2. The leader renews every `retry_seconds`. It counts as leading only while its last successful
   renewal started less than `renew_seconds` ago (`leading()`): that is the fence. A follower
   cannot take over before `lease_seconds` after it saw that renewal, which is later still, so
   an old leader stops acting at least `lease_seconds - renew_seconds` before a new one starts.
3. On a clean stop the leader releases the Lease (no holder, duration 1 s), so the other replica
   takes over at its next try instead of waiting out the lease; a killed leader is replaced
   within `lease_seconds + retry_seconds`.

Why not `kubernetes.leaderelection` (shipped with the client): its `LeaderElection.run()` loops
forever while following, with no way to stop it (a SIGTERM'd follower cannot exit cleanly); it
never releases the Lease on stop, so every rolling update waits a whole lease; its `LeaseLock`
builds `CoordinationV1Api()` on the client's global default configuration instead of the
backend's (in-cluster or kubeconfig) client; it answers a bad setting with `sys.exit`; and it
exposes no "leading now" check to fence each action with.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.base import (
    ClusterBackend,
    ClusterError,
    Launched,
    LaunchSpec,
    LogQuery,
    NodeInfo,
    WorkerLog,
    WorkloadStatus,
)
from gpuqueue.cluster.k8s_calls import load_configuration

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """Seconds, as client-go names them. A killed leader is replaced within lease + retry
    (12 s by default); the fence margin for calls in flight is lease - renew (3 s)."""

    lease_seconds: int = 10
    renew_seconds: float = 7.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_seconds > self.renew_seconds > self.retry_seconds > 0:
            raise ValueError("lease_seconds > renew_seconds > retry_seconds > 0 is required")


def api_client_for(kubeconfig: str | None, context: str | None = None) -> client.ApiClient:
    """A client as the backend configures its own (a kubeconfig, else the pod's ServiceAccount),
    for a process that needs only its Lease (beat): no backend, so no database either."""
    configuration = client.Configuration()
    load_configuration(configuration, kubeconfig, context)
    configuration.retries = 0  # the election retries every retry_seconds itself
    return client.ApiClient(configuration)


def default_identity() -> str:
    """The pod's name (its hostname) and a per-process suffix: a restarted replica does not
    mistake its predecessor's unexpired lease for its own."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Elector:
    """One candidate for one Lease. `start()` runs the election in a daemon thread; the caller
    asks `leading()` before each action and calls `stop()` (which releases) when done."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str | None = None,
        timing: LeaseTiming | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = client.CoordinationV1Api(api_client)
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.timing = timing or LeaseTiming()
        self.clock = clock
        # When the last successful acquire or renew was sent (this process's monotonic clock).
        self._renewed_at: float | None = None
        # The other holder's record as last seen, and when it was first seen unchanged.
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one API exchange at a time (the thread and release())

    # The fence -------------------------------------------------------------------------

    def leading(self) -> bool:
        """True while this candidate holds the Lease by the fence of step 2."""
        renewed = self._renewed_at
        return renewed is not None and self.clock() - renewed < self.timing.renew_seconds

    def wait_to_lead(self, should_stop: Callable[[], bool], tick: Callable[[], None]) -> bool:
        """Block until leading (True) or `should_stop()` (False); `tick()` every poll, so a
        follower can show it is alive (the watcher's heartbeat file)."""
        while not should_stop():
            if self.leading():
                return True
            tick()
            self._stopping.wait(0.2)
        return False

    # The election ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"lease-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop campaigning and release the Lease if this candidate holds it."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timing.renew_seconds + 5)
        self.release()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.try_acquire_or_renew()
            self._stopping.wait(self.timing.retry_seconds)

    def try_acquire_or_renew(self) -> bool:
        """One round of step 1 (or 2, when leading); True when this candidate now holds it."""
        with self._lock:
            sent = self.clock()
            try:
                won = self._acquire_or_renew(sent)
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, _describe(exc))
                won = False
            if won:
                if not self.leading():
                    log.info("lease %s/%s: %s leads", self.namespace, self.name, self.identity)
                self._renewed_at = sent
            return won

    def _acquire_or_renew(self, sent: float) -> bool:
        timeout = self.timing.retry_seconds
        now = _micro_time(datetime.now(UTC))
        try:
            response = self.api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = {
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, acquired=now, transitions=0),
            }
            try:
                self.api.create_namespaced_lease(
                    self.namespace, body, _preload_content=False, _request_timeout=timeout
                )
            except ApiException as exc2:
                if exc2.status == 409:  # the other candidate created it first
                    return False
                raise
            return True
        lease = json.loads(response.data)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder != self.identity:
            self._renewed_at = None  # another holds it (or took it over): never act on old news
            record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
            if record != self._observed:
                self._observed, self._observed_at = record, sent
            duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_seconds)
            if holder and sent - self._observed_at < duration:
                return False  # held, and renewed within its duration as this clock counts
        transitions = int(spec.get("leaseTransitions") or 0)
        lease["spec"] = self._spec(
            now,
            acquired=spec.get("acquireTime") if holder == self.identity else now,
            transitions=transitions if holder == self.identity else transitions + 1,
        )
        try:
            self.api.replace_namespaced_lease(
                self.name, self.namespace, lease, _preload_content=False, _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status == 409:  # written by the other candidate since the read
                self._renewed_at = None
                return False
            raise
        return True

    def _spec(self, now: str, *, acquired: str | None, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.timing.lease_seconds,
            "acquireTime": acquired,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def release(self) -> None:
        """Step 3: stop acting first, then clear the holder so the other replica need not
        wait out the lease. Only a Lease this candidate holds is touched (resourceVersion)."""
        with self._lock:
            if self._renewed_at is None:
                return
            self._renewed_at = None
            try:
                response = self.api.read_namespaced_lease(
                    self.name, self.namespace, _preload_content=False, _request_timeout=2
                )
                lease = json.loads(response.data)
                spec = lease.get("spec") or {}
                if spec.get("holderIdentity") != self.identity:
                    return
                spec.update(
                    holderIdentity=None,
                    leaseDurationSeconds=1,
                    renewTime=_micro_time(datetime.now(UTC)),
                )
                lease["spec"] = spec
                self.api.replace_namespaced_lease(
                    self.name, self.namespace, lease, _preload_content=False, _request_timeout=2
                )
                log.info("lease %s/%s: %s released it", self.namespace, self.name, self.identity)
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                log.warning(
                    "lease %s/%s: not released (%s); the other replica takes over when it expires",
                    self.namespace,
                    self.name,
                    _describe(exc),
                )


class FencedBackend(ClusterBackend):
    """A backend whose actions on workloads (launch, checkpoint signal, stop, release) run only
    while `leading()`: a watcher that lost its Lease, or has not got it, changes nothing on the
    cluster. Each refused action is a transient ClusterError, which the cluster sync already
    treats as "deferred to the next pass" (the leader's). Reads pass through."""

    def __init__(self, backend: ClusterBackend, leading: Callable[[], bool]) -> None:
        self.backend = backend
        self.leading = leading
        self.name = backend.name
        self.launch_concurrency = backend.launch_concurrency

    def _fence(self, action: str) -> None:
        if not self.leading():
            raise ClusterError(
                f"{action} skipped: this process does not hold the lease", transient=True
            )

    def list_nodes(self, live: Collection[tuple[int, int]] | None = None) -> list[NodeInfo]:
        return self.backend.list_nodes(live)

    def launch(self, spec: LaunchSpec) -> str | Launched | None:
        self._fence("launch")
        return self.backend.launch(spec)

    def launch_all(self, specs: Sequence[LaunchSpec]) -> list[str | Launched | None | Exception]:
        try:
            self._fence("launch")
        except ClusterError as exc:
            return [exc for _ in specs]
        return self.backend.launch_all(specs)

    def request_checkpoint(self, job_id: int, attempt: int, deadline: datetime) -> None:
        self._fence("checkpoint signal")
        self.backend.request_checkpoint(job_id, attempt, deadline)

    @property
    def withdraws_checkpoints(self) -> bool:  # type: ignore[override]
        return self.backend.withdraws_checkpoints

    def withdraw_checkpoint(self, job_id: int, attempt: int) -> None:
        self._fence("checkpoint withdrawal")
        self.backend.withdraw_checkpoint(job_id, attempt)

    def stop(self, job_id: int, attempt: int) -> None:
        self._fence("stop")
        self.backend.stop(job_id, attempt)

    def observe(self) -> list[WorkloadStatus]:
        return self.backend.observe()

    def read_log(self, job_id: int, attempt: int, worker: int, query: LogQuery) -> WorkerLog:
        return self.backend.read_log(job_id, attempt, worker, query)

    def unseen_namespaces(self) -> Collection[str]:
        return self.backend.unseen_namespaces()

    def release_gangs(self) -> int:
        self._fence("release")
        return self.backend.release_gangs()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
