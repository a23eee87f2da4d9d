"""The small interface every cluster backend implements (simulated, Kubernetes).

The admission cycle and the cluster sync speak only this interface. Every call is idempotent:
launching a job twice, stopping a stopped job or signalling twice is harmless, so a crash between
the database commit and the call is repaired by calling again.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuqueue.core.fabric import NO_FABRIC, Fabric

# The label NVIDIA's GPU Feature Discovery puts on a node: its GPU model
# ("NVIDIA-A100-SXM4-80GB"). Jobs bound to models carry a node affinity on it.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MODEL_MAX_CHARS = 63  # a label value's limit


def gpu_model_of(labels: Mapping[str, str]) -> str:
    """A node's GPU model as its labels tell it ("" when they do not)."""
    return str(labels.get(GPU_PRODUCT_LABEL, ""))[:GPU_MODEL_MAX_CHARS]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    capacity: Mapping[str, int]  # allocatable GPUs by resource name
    # Allocatable devices that are not GPUs (RDMA, host devices), for flavors' fabrics.
    devices: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_model: str = ""  # its GPU_PRODUCT_LABEL; "": none told
    taints: Sequence[Mapping[str, str]] = ()
    ready: bool = True
    cordoned: bool = False
    used_externally: Mapping[str, int] = field(default_factory=dict)
    # GPUs that gpuqueue's own proven pods still hold while they terminate (or whose attempt
    # is no longer live), by job id and resource name; not in `used_externally`.
    draining: Mapping[int, Mapping[str, int]] = field(default_factory=dict)
    # Allocatable CPU (millicores), memory (bytes) and pods (None: not limited), and what
    # pods gpuqueue did not create request of them.
    allocatable_cpu_millicores: int | None = None
    allocatable_memory_bytes: int | None = None
    allocatable_pods: int | None = None
    external_cpu_millicores: int = 0
    external_memory_bytes: int = 0
    external_pods: int = 0


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything a backend needs to start one attempt of an admitted job."""

    job_id: int
    attempt: int
    team: str
    namespace: str
    name: str
    image: str
    command: Sequence[str]
    env: Mapping[str, str]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    workers: int
    gpus_per_worker: int
    resource_name: str
    placement: Mapping[str, int]  # node -> workers
    checkpoint_grace_seconds: int
    max_runtime_seconds: int | None
    checkpoint_location: str = ""  # where the previous attempt saved, for resuming
    expected_runtime_seconds: int | None = None  # as the user declared it (the simulator runs it)
    tolerations: Sequence[Mapping[str, str]] = ()  # the flavor's, for its tainted nodes
    cpu_millicores: int = 0  # per worker, requested (0: none)
    memory_mib: int = 0  # per worker, requested and limit (0: none)
    cpu_limit_millicores: int = 0  # per worker (0: no limit)
    memory_limit_mib: int | None = None  # per worker (None: the request)
    shm_mib: int | None = None  # /dev/shm (None: half the memory request)
    # The flavor's security profile: the ids workers run as (None: the image's) and whether
    # root is allowed (then runAsNonRoot is left out).
    run_as_user: int | None = None
    run_as_group: int | None = None
    fs_group: int | None = None
    allow_root: bool = False
    # Existing PVCs of the team's namespace: {"claim", "mount_path", "read_only"}.
    volumes: Sequence[Mapping[str, str | bool]] = ()
    image_pull_secrets: Sequence[str] = ()
    env_from_secrets: Sequence[str] = ()  # Secret names whose keys become variables
    priority_class: str = ""
    service_account: str = ""  # "": none, and no API token mounted
    # The install (its label on every object) and the HMAC every object of the attempt carries
    # (gpuqueue.cluster.proof): a relaunch adopts only what carries it.
    instance: str = ""
    proof: str = ""
    # How much of `resource_name` each worker asks (0: gpus_per_worker): a shared flavor's
    # resource counts slices of a GPU.
    resource_count: int = 0
    # GPU models its nodes must have (GPU_PRODUCT_LABEL); empty: any.
    gpu_models: Sequence[str] = ()

    @property
    def resource_per_worker(self) -> int:
        return self.resource_count or self.gpus_per_worker

    # The flavor's fabric (gpuqueue.core.fabric): network devices, capabilities and the like.
    fabric: Fabric = NO_FABRIC
    # A DRA flavor's DeviceClass and CEL selector: each worker's GPUs come from a claim of
    # `resource_per_worker` devices of that class, not from `resource_name` in its limits.
    device_class: str = ""
    device_selector: str = ""
    # A fraction of a GPU of a shared DRA flavor (gpuqueue.cluster.dra_sharing): the worker's
    # device comes from the ResourceClaim its GPU's sharers share, named here, on the node and
    # GPU index planned, shared by the flavor's strategy; "" for any other job.
    shared_claim: str = ""
    shared_gpu: tuple[str, int] = ("", 0)
    sharing_strategy: str = ""
    # A user's own Job that the job mirrors (gpuqueue.cluster.sources): its name and the uid
    # recorded when it was mirrored; "" for a job whose workload gpuqueue writes itself.
    source: str = ""
    source_uid: str = ""
    source_kind: str = ""  # "Job", "PyTorchJob" or "RayJob" ("": a Job)
    # A user's object whose pod sets ask different GPUs per pod (core/pod_sets.py): each GPU
    # pod's node, in pod order (`placement` then counts units); empty: pods take its slots.
    pod_nodes: Sequence[str] = ()


class Phase(enum.StrEnum):
    STARTING = "STARTING"  # created, not every worker runs yet
    RUNNING = "RUNNING"  # the whole gang runs
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    LOST = "LOST"  # the gang broke (a node died, pods evicted): requeue


@dataclass(frozen=True, slots=True)
class WorkloadStatus:
    job_id: int
    attempt: int
    phase: Phase
    since: datetime | None = None  # when it entered this phase (STARTING: when created)
    exit_code: int | None = None
    message: str = ""
    # Set when the workload acknowledged a checkpoint request (the simulated cluster does this
    # itself; on Kubernetes the workload calls the API instead).
    checkpoint_location: str | None = None
    # The gang could not be started (its pods refused, or its planned nodes taken): requeued
    # with backoff, and failed after GPUQUEUE_MAX_START_ATTEMPTS.
    start_failure: bool = False


class ClusterError(Exception):
    """A backend call failed; `transient` says whether retrying may help."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class Squatted(ClusterError):
    """An object under the attempt's name exists and is not gpuqueue's (it carries none of the
    attempt's proof): it is neither adopted nor deleted, and the launch is a failed start (the
    job is requeued with backoff; its next attempt has another name)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


class Claimed(ClusterError):
    """A team namespace belongs to another gpuqueue install (its marker says so)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


class NoCredentials(ClusterError):
    """This process has nothing to reach the cluster with: no kubeconfig configured, and not
    in a pod with its ServiceAccount token mounted. The install's doing; no retry helps."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


@dataclass(frozen=True, slots=True)
class Launched:
    """What a launch made: the token the workload acknowledges its checkpoint with, and the
    uids the API gave the attempt's Secret and Job (recorded: the proof of what is gpuqueue's)."""

    token: str
    secret_uid: str = ""
    job_uid: str = ""


@dataclass(frozen=True, slots=True)
class LogQuery:
    """Which part of one worker's log to read (the names of Kubernetes' PodLogOptions)."""

    tail_lines: int | None = None  # the last lines only
    limit_bytes: int | None = None  # at most this much, counted from the first line read
    since_seconds: int | None = None  # only lines written this recently


@dataclass(frozen=True, slots=True)
class WorkerLog:
    lines: Sequence[str]
    truncated: bool = False  # `limit_bytes` cut it short


class LogNotFound(ClusterError):
    """The worker has no log on the cluster: its pod was never created, or is gone."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


class ClusterBackend(abc.ABC):
    name: str
    # How many launches may run at once. A backend that writes the database launches one at a
    # time (the caller's threads would each need a connection).
    launch_concurrency: int = 1

    @abc.abstractmethod
    def list_nodes(self, live: Collection[tuple[int, int]] | None = None) -> list[NodeInfo]:
        """Every node; GPUs held by anything but the `live` (job id, attempt) pairs count as
        used by others."""

    @abc.abstractmethod
    def launch(self, spec: LaunchSpec) -> str | Launched | None:
        """Start the job's gang on its planned nodes; already started is success. Returns the
        token the workload acknowledges its checkpoint with, when the backend hands it one
        (the caller keeps its hash), with the uids of what it made (`Launched`) where the
        backend has them, else None."""

    def launch_all(self, specs: Sequence[LaunchSpec]) -> list[str | Launched | None | Exception]:
        """`launch` for each spec, up to `launch_concurrency` at once; one outcome per spec,
        in order: what its launch returned, or the exception it raised (one job's bad launch
        must not stop the rest). A backend that can start many workloads in one request
        overrides this."""

        def one(spec: LaunchSpec) -> str | Launched | None | Exception:
            try:
                return self.launch(spec)
            except Exception as exc:  # noqa: BLE001 - returned to the caller, per job
                return exc

        if self.launch_concurrency > 1 and len(specs) > 1:
            with ThreadPoolExecutor(max_workers=self.launch_concurrency) as pool:
                return list(pool.map(one, specs))
        return [one(spec) for spec in specs]

    @abc.abstractmethod
    def request_checkpoint(self, job_id: int, attempt: int, deadline: datetime) -> None:
        """Ask the running workload to save its state before `deadline`."""

    # Whether `withdraw_checkpoint` tells the workload. A preemption is withdrawn only on a
    # backend that can: a workload still asked to save would save, acknowledge and exit, and
    # a job that is running again would not be requeued for it.
    withdraws_checkpoints: bool = False

    def withdraw_checkpoint(self, job_id: int, attempt: int) -> None:
        """Tell the workload that the save `request_checkpoint` asked for is no longer needed
        (its preemption was withdrawn): it goes on running. Harmless when nothing was asked."""
        raise NotImplementedError(f"{self.name} cannot withdraw a checkpoint request")

    @abc.abstractmethod
    def stop(self, job_id: int, attempt: int) -> None:
        """Stop and remove the workload; already gone is success."""

    @abc.abstractmethod
    def observe(self) -> list[WorkloadStatus]:
        """The status of every workload on the cluster that the backend proves gpuqueue made
        (Kubernetes: gpuqueue.cluster.proof); lookalikes make none."""

    @abc.abstractmethod
    def read_log(self, job_id: int, attempt: int, worker: int, query: LogQuery) -> WorkerLog:
        """The log of worker `worker` (its completion index) of the attempt. Raises LogNotFound
        when the cluster has no such worker, and ClusterError when it cannot be asked."""

    def unseen_namespaces(self) -> Collection[str]:
        """Team namespaces whose workloads the last observe() could not see (the sync leaves
        their jobs as they are rather than take them for gone)."""
        return ()

    def list_sources(self) -> list[Mapping[str, Any]] | None:
        """The users' own Jobs labelled with a queue (gpuqueue.cluster.sources), in every team
        namespace this backend can read; None where the backend has no such objects."""
        return None

    def unseen_source_namespaces(self) -> Collection[str]:
        """Team namespaces whose labelled Jobs the last list_sources() could not read."""
        return ()

    def describe_source(
        self, namespace: str, name: str, uid: str, job_id: int | None, text: str, kind: str = ""
    ) -> None:
        """Write where the object stands onto it (an annotation and an Event), so that
        `kubectl describe` says why it waits; `job_id`: the job it became (None: refused);
        `kind`: the object's kind ("": a Job)."""
        return None

    def release_gangs(self) -> int:
        """Let launched gangs that wait for their placement start (Kubernetes: pods behind a
        scheduling gate); returns how many workers were released. Nothing waits by default."""
        return 0
