"""On a real control plane, with Kubeflow's training operator (v1.8.1) and KubeRay's operator
(v1.5.0) built from their Go modules and running as their ServiceAccounts, under deploy/'s
admission policies: a user's own PyTorchJob or RayJob labelled `gpuqueue.dev/queue` (the
manifests of examples/, as docs/kubernetes.md shows them) waits suspended, with no pod, and says
why (`kubectl describe`); gpuqueue admits it per plan, every pod of every pod set on its planned
node; a preemption suspends a PyTorchJob and it resumes as a new attempt; cancelling its job
suspends and deletes it, deleting a RayJob cancels its job. The policy refuses an unlabelled GPU
PyTorchJob, one labelled for another team, one not created suspended, and a GPU RayCluster."""

from __future__ import annotations

import base64
import copy
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster.k8s_watch import QUEUED, follow, start_watches
from gpuqueue.cluster.manifests import PODINFO_DIR, token_secret_name
from gpuqueue.cluster.sources import JOB_ANNOTATION, STATUS_ANNOTATION
from gpuqueue.core.states import JobState
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Job
from gpuqueue.services.jobs.cancel import cancel_job
from tests.kube import frameworks as ops
from tests.kube.conftest import DEPLOY, Kube, acknowledge
from tests.kube.controlplane import ControlPlane, Unavailable, api_client_for, kubectl_binary
from tests.kube.test_admission import (  # noqa: F401 - the fixtures, used by name
    guard,
    guarded,
    refused_by_policy,
)
from tests.kube.test_workloads_job import (  # noqa: F401 - the fixture, used by name
    LONG,
    cluster,
    events_of,
    mirrored,
    state,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
POLICY = DEPLOY / "base" / "admission-policy-frameworks.yaml"
PYTORCH = ("kubeflow.org", "v1", "pytorchjobs")
RAY = ("ray.io", "v1", "rayjobs")
RAYCLUSTER = ("ray.io", "v1", "rayclusters")


def manifest(name: str) -> dict[str, Any]:
    """The example as docs/kubernetes.md shows it, word for word."""
    return dict(yaml.safe_load((EXAMPLES / name).read_text()))


@pytest.fixture(scope="module")
def operators(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ops.Operator]]:
    """Both operators built (or the tests skip, saying why), their CRDs installed, and each
    running as its ServiceAccount."""
    try:
        binaries = [ops.build(fw) for fw in ops.FRAMEWORKS]
        for fw in ops.FRAMEWORKS:
            ops.crds(fw)  # the module's files, from the Go module cache
    except Unavailable as exc:
        pytest.skip(f"the operators cannot be built here: {exc}")
    api = api_client_for(control_plane.kubeconfig)
    workdir = tmp_path_factory.mktemp("operators")
    running = []
    try:
        for fw, binary in zip(ops.FRAMEWORKS, binaries, strict=True):
            ops.install_crds(api, fw)
            config = ops.account_kubeconfig(api, fw, control_plane.kubeconfig, workdir)
            running.append(ops.Operator(fw, workdir, config, binary).start())
        yield running
    finally:
        for operator in running:
            operator.stop()


def custom(kube: Kube, user: str = "") -> client.CustomObjectsApi:
    api = api_client_for(kube.plane.kubeconfig)
    if user:
        api.set_default_header("Impersonate-User", user)
    return client.CustomObjectsApi(api)


@pytest.fixture
def teams(
    cluster: Kube,  # noqa: F811
    operators: list[ops.Operator],
    guarded: client.ApiClient,  # noqa: F811
) -> Iterator[Kube]:
    """`cluster` of test_workloads_job (team namespaces, the base policy, gpuqueue as its
    ServiceAccount) with the operators, the frameworks' policy, and alice and carol allowed to
    make PyTorchJobs, RayJobs and RayClusters in their team's namespace."""
    kube = cluster
    kube.backend.custom = client.CustomObjectsApi(guarded)
    rbac = client.RbacAuthorizationV1Api(kube.api)
    admission = client.AdmissionregistrationV1Api(kube.api)
    for namespace in ("team-a", "team-b"):
        role = {
            "metadata": {"name": "frameworks"},
            "rules": [
                {
                    "apiGroups": ["kubeflow.org", "ray.io"],
                    "resources": ["pytorchjobs", "rayjobs", "rayclusters"],
                    "verbs": ["create", "get", "list", "update", "patch", "delete"],
                }
            ],
        }
        person = "alice" if namespace == "team-a" else "carol"
        binding = {
            "metadata": {"name": "frameworks"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "frameworks",
            },
            "subjects": [{"kind": "User", "name": person}],
        }
        for create, body in (
            (rbac.create_namespaced_role, role),
            (rbac.create_namespaced_role_binding, binding),
        ):
            try:
                create(namespace, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
    docs = [d for d in yaml.safe_load_all(POLICY.read_text()) if d]
    for doc in docs:
        create = (
            admission.create_validating_admission_policy
            if doc["kind"] == "ValidatingAdmissionPolicy"
            else admission.create_validating_admission_policy_binding
        )
        try:
            create(doc)
        except ApiException as exc:
            if exc.status != 409:
                raise
    # The API server takes the policy in within a second or two.
    unlabelled = manifest("pytorchjob.yaml")
    del unlabelled["metadata"]["labels"]["gpuqueue.dev/queue"]
    kube.wait(lambda: _refused(kube, unlabelled) is not None)
    yield kube
    for group, version, plural in (PYTORCH, RAY):
        for namespace in ("team-a", "team-b"):
            custom(kube).delete_collection_namespaced_custom_object(
                group, version, namespace, plural
            )
    for doc in docs:
        delete = (
            admission.delete_validating_admission_policy
            if doc["kind"] == "ValidatingAdmissionPolicy"
            else admission.delete_validating_admission_policy_binding
        )
        delete(doc["metadata"]["name"])
    kube.wait(lambda: not _objects(kube, RAY) and not _objects(kube, RAYCLUSTER), timeout=60)


def _refused(kube: Kube, body: dict[str, Any]) -> ApiException | None:
    try:
        custom(kube, "alice").create_namespaced_custom_object(
            *PYTORCH[:2], "team-a", PYTORCH[2], body, dry_run="All"
        )
    except ApiException as exc:
        return exc
    return None


def _objects(kube: Kube, what: tuple[str, str, str], namespace: str = "team-a") -> list[Any]:
    group, version, plural = what
    found = custom(kube).list_namespaced_custom_object(group, version, namespace, plural)
    return list(found["items"])


def read(kube: Kube, what: tuple[str, str, str], name: str) -> dict[str, Any]:
    group, version, plural = what
    return dict(custom(kube).get_namespaced_custom_object(group, version, "team-a", plural, name))


def create(
    kube: Kube, what: tuple[str, str, str], body: dict[str, Any], user: str = "alice"
) -> Any:
    group, version, plural = what
    return custom(kube, user).create_namespaced_custom_object(
        group, version, "team-a", plural, body
    )


def secrets(kube: Kube) -> list[Any]:
    return list(kube.core.list_namespaced_secret("team-a").items)


def pods_except(kube: Kube, blocker: Job) -> list[dict[str, Any]]:
    """Every pod in team-a but the blocker's."""
    return [
        p
        for p in kube.pods("team-a", selector="")
        if (p["metadata"].get("labels") or {}).get("gpuqueue.dev/job-id") != str(blocker.pk)
    ]


def admit(kube: Kube, job: Job) -> None:
    def running() -> bool:
        run_cycle(backend=kube.backend)
        return state(job) == JobState.RUNNING

    try:
        kube.sync_until(running, timeout=90)
    except AssertionError as exc:
        job.refresh_from_db()
        pods = {
            p["metadata"]["name"]: (p["metadata"].get("annotations"), p["spec"].get("nodeName"))
            for p in kube.pods("team-a", selector="")
        }
        why = f"{job.state}: {job.pending_reason} {job.message}; pods: {pods}"
        raise AssertionError(why) from exc


def described(kube: Kube, kind: str, name: str) -> str:
    """`kubectl describe` as its owner runs it."""
    result = subprocess.run(
        [str(kubectl_binary()), "--kubeconfig", str(kube.plane.kubeconfig), "-n", "team-a"]
        + ["describe", kind, name],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout


def waits_and_says_why(kube: Kube, kind: str, what: tuple[str, str, str], name: str) -> Job:
    uid = read(kube, what, name)["metadata"]["uid"]
    job = mirrored(kube, uid)
    run_cycle(backend=kube.backend)
    kube.sync_until(
        lambda: (
            "waiting"
            in (read(kube, what, name)["metadata"].get("annotations") or {}).get(
                STATUS_ANNOTATION, ""
            )
        )
    )
    obj = read(kube, what, name)
    annotations = obj["metadata"]["annotations"]
    assert annotations[JOB_ANNOTATION] == str(job.pk) and state(job) == JobState.PENDING
    assert any(
        e.startswith("Queued: waiting in gpuqueue job") for e in events_of(kube, uid, "team-a")
    )
    text = described(kube, kind, name)
    assert annotations[STATUS_ANNOTATION].split(":")[0] in text and "Queued" in text
    return job


def test_a_labelled_pytorchjob_waits_runs_as_planned_is_preempted_resumes_and_is_cancelled(
    teams: Kube, submit: Any, world: Any
) -> None:
    kube = teams
    blocker = submit(world.alice, workers=4, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(blocker) == JobState.RUNNING)
    create(kube, PYTORCH, manifest("pytorchjob.yaml"))
    job = waits_and_says_why(kube, "pytorchjob", PYTORCH, "pretrain")
    assert (job.team, job.user.username) == (world.team_a, "pipeline@team-a")
    assert (job.workers, job.gpus_per_worker, job.flavor, job.max_runtime_seconds) == (
        4,
        8,
        world.h100,
        86400,
    )
    assert job.source.kind == "PyTorchJob"
    # No pod before admission.
    assert read(kube, PYTORCH, "pretrain")["spec"]["runPolicy"]["suspend"] is True
    assert pods_except(kube, blocker) == []

    # The room comes: admitted, the master and every worker on its planned node.
    cancel_job(world.alice, blocker)
    kube.sync_until(lambda: not kube.pods("team-a", selector=f"gpuqueue.dev/job-id={blocker.pk}"))
    admit(kube, job)
    pods = kube.pods("team-a", selector="training.kubeflow.org/job-name=pretrain")
    assert len(pods) == 4 and all(p["status"]["phase"] == "Running" for p in pods)
    assert Counter(p["spec"]["nodeName"] for p in pods) == Counter(job.placement)
    # Every pod can take part in the checkpoint protocol as gpuqueue's own workers do: the
    # attempt's token from a Secret that goes with the PyTorchJob, and its annotations file.
    secret_name = token_secret_name(job.pk, 1)
    secret = kube.core.read_namespaced_secret(secret_name, "team-a")
    [owner] = secret.metadata.owner_references
    assert (owner.kind, owner.name) == ("PyTorchJob", "pretrain")
    for pod in pods:
        [container] = pod["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["GPUQUEUE_JOB_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == secret_name
        assert env["GPUQUEUE_JOB_ID"]["value"] == str(job.pk)
        assert PODINFO_DIR in {m["mountPath"] for m in container["volumeMounts"]}
    token = base64.b64decode(secret.data["token"]).decode()

    # A job of a higher priority preempts it. The workload acknowledges its checkpoint with
    # the token well inside its grace: suspended (its pods go) and requeued at once, without
    # waiting out the grace; the attempt's Secret goes.
    Job.objects.filter(pk=job.pk).update(checkpoint_grace_seconds=600)
    urgent = submit(world.alice, workers=1, gpus_per_worker=8, priority=10, annotations=LONG)
    run_cycle(backend=kube.backend)
    urgent.refresh_from_db()
    assert state(job) == JobState.PREEMPTING, urgent.pending_reason
    acknowledge(job.pk, token, "s3://ckpt/pretrain/step-300")
    kube.sync_until(lambda: state(job) == JobState.PENDING)
    kube.wait(lambda: secret_name not in {s.metadata.name for s in secrets(kube)})
    kube.wait(lambda: read(kube, PYTORCH, "pretrain")["spec"]["runPolicy"]["suspend"] is True)
    kube.wait(lambda: not kube.pods("team-a", selector="training.kubeflow.org/job-name=pretrain"))
    # ... and resumes, as a second attempt, once the room is back.
    cancel_job(world.alice, urgent)
    admit(kube, job)
    job.refresh_from_db()
    assert job.attempts == 2
    pods = kube.pods("team-a", selector="training.kubeflow.org/job-name=pretrain")
    assert Counter(p["spec"]["nodeName"] for p in pods) == Counter(job.placement)

    # Cancelling the job suspends and deletes the PyTorchJob gpuqueue admitted.
    cancel_job(world.bob, job)  # a team admin: the job is the pipeline identity's
    kube.sync_until(lambda: not _objects(kube, PYTORCH))


def test_a_labelled_rayjob_waits_then_runs_its_head_and_workers_as_planned(
    teams: Kube, submit: Any, world: Any
) -> None:
    kube = teams
    blocker = submit(world.alice, workers=4, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(blocker) == JobState.RUNNING)
    create(kube, RAY, manifest("rayjob.yaml"))
    job = waits_and_says_why(kube, "rayjob", RAY, "sweep")
    assert (job.workers, job.gpus_per_worker, job.cpu_millicores) == (2, 8, 8000)
    assert _objects(kube, RAYCLUSTER) == [] and pods_except(kube, blocker) == []

    cancel_job(world.alice, blocker)
    kube.sync_until(lambda: not kube.pods("team-a", selector=f"gpuqueue.dev/job-id={blocker.pk}"))
    admit(kube, job)
    (ray_cluster,) = _objects(kube, RAYCLUSTER)  # KubeRay's, for the RayJob
    pods = kube.pods("team-a", selector=f"ray.io/cluster={ray_cluster['metadata']['name']}")
    workers = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    (head,) = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    assert Counter(p["spec"]["nodeName"] for p in workers) == Counter(job.placement)
    assert head["spec"]["nodeName"] in job.placement and head["status"]["phase"] == "Running"

    # Deleting the RayJob cancels its job.
    custom(kube, "alice").delete_namespaced_custom_object(*RAY[:2], "team-a", RAY[2], "sweep")
    kube.sync_until(lambda: state(job) == JobState.CANCELLED)


def test_the_watcher_follows_labelled_objects_so_that_passes_list_none_of_them(
    teams: Kube, submit: Any, world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the watcher's copy live, a labelled PyTorchJob is mirrored, waits and runs as
    planned while the passes LIST no labelled Job, PyTorchJob or RayJob where they are
    followed (each team namespace would otherwise cost three LISTs per pass for the source
    sync and two for the views); a team namespace not followed yet (one made since the last
    resync) is listed as before."""
    kube = teams
    backend = kube.backend
    blocker = submit(world.alice, workers=4, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=backend)
    kube.sync_until(lambda: state(blocker) == JobState.RUNNING)
    watches = start_watches(backend, threading.Event(), ["team-a"], watch_seconds=30)
    lists: Counter[tuple[str, str]] = Counter()

    def counted(kind: str, fn: Any, at: int) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("watch"):
                lists[(kind if at == 0 else args[3], args[at])] += 1
            return fn(*args, **kwargs)

        return call

    try:
        kube.wait(lambda: all(w.listed.is_set() for w in watches.values()))
        kinds = {(w.kind, w.namespace) for w in watches.values()}
        assert {(k, "team-a") for k in (QUEUED, "PyTorchJob", "RayJob")} <= kinds
        # The watches hold the methods they list with; the passes' own calls are counted.
        custom_list = backend.custom.list_namespaced_custom_object
        monkeypatch.setattr(
            backend.custom, "list_namespaced_custom_object", counted("", custom_list, 2)
        )
        job_list = backend.batch.list_namespaced_job
        monkeypatch.setattr(backend.batch, "list_namespaced_job", counted("jobs", job_list, 0))
        follow(backend.store, watches)
        assert backend.store.live and not backend.store.unseen_sources

        create(kube, PYTORCH, manifest("pytorchjob.yaml"))
        job = waits_and_says_why(kube, "pytorchjob", PYTORCH, "pretrain")
        cancel_job(world.alice, blocker)
        kube.sync_until(
            lambda: not kube.pods("team-a", selector=f"gpuqueue.dev/job-id={blocker.pk}")
        )
        admit(kube, job)
        pods = kube.pods("team-a", selector="training.kubeflow.org/job-name=pretrain")
        assert Counter(p["spec"]["nodeName"] for p in pods) == Counter(job.placement)
        # No LIST of a labelled object where the watcher follows them; team-b, not followed,
        # is listed at each pass: its labelled Jobs and both kinds.
        assert {namespace for _, namespace in lists} == {"team-b"}, lists
        assert {kind for kind, _ in lists} == {"jobs", "pytorchjobs", "rayjobs"}, lists
    finally:
        for watch in watches.values():
            watch.stop()
        backend.store.live = False
        backend.store.watched = frozenset()


def test_the_policy_refuses_unlabelled_foreign_running_gpu_frameworks(teams: Kube) -> None:
    kube = teams
    plain = manifest("pytorchjob.yaml")
    del plain["metadata"]["labels"]["gpuqueue.dev/queue"]
    refused_by_policy(
        lambda: create(kube, PYTORCH, plain),
        "not by creating a PyTorchJob directly (or label the PyTorchJob gpuqueue.dev/queue",
    )
    theirs = manifest("pytorchjob.yaml")
    theirs["metadata"]["labels"]["gpuqueue.dev/queue"] = "team-b"
    refused_by_policy(
        lambda: create(kube, PYTORCH, theirs),
        "names team team-b, and namespace team-a is team team-a's",
    )
    eager = manifest("rayjob.yaml")
    eager["spec"]["suspend"] = False
    refused_by_policy(lambda: create(kube, RAY, eager), "is created suspended (spec.suspend: true)")
    forged = manifest("pytorchjob.yaml")
    template = forged["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    template["metadata"] = {"labels": {"gpuqueue.dev/job-id": "990003"}}
    refused_by_policy(
        lambda: create(kube, PYTORCH, forged), "may not put them in its pod templates"
    )
    ray_cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "around"},
        "spec": copy.deepcopy(manifest("rayjob.yaml")["spec"]["rayClusterSpec"]),
    }
    refused_by_policy(
        lambda: create(kube, RAYCLUSTER, ray_cluster), "not by creating a RayCluster directly"
    )
    # One alice may create waits; alice may not start it herself.
    create(kube, PYTORCH, manifest("pytorchjob.yaml"))
    refused_by_policy(
        lambda: custom(kube, "alice").patch_namespaced_custom_object(
            *PYTORCH[:2],
            "team-a",
            PYTORCH[2],
            "pretrain",
            {"spec": {"runPolicy": {"suspend": False}}},
        ),
        "only gpuqueue changes its spec",
    )


def test_a_pytorchjob_whose_master_asks_one_gpu_waits_whole_then_runs_each_pod_where_planned(
    teams: Kube, submit: Any, world: Any
) -> None:
    """Pod sets of different GPUs per pod are one gang: a 1-GPU Master beside 3 Workers of 8
    (25 GPUs) waits while 17 are free, creating no pod, then runs with each pod on its own
    planned node: the Master on the one GPU a busy node has left, the Workers on empty nodes."""
    kube = teams
    busy = submit(world.alice, workers=1, gpus_per_worker=7, annotations=LONG)
    # Another team's job within its guarantee: not reclaimable, and not under team-a's limit
    # (team-a's 7 + 25 is its limit of 32).
    full = submit(world.carol, team=world.team_b, workers=1, gpus_per_worker=8, annotations=LONG)
    run_cycle(backend=kube.backend)
    kube.sync_until(lambda: state(busy) == JobState.RUNNING and state(full) == JobState.RUNNING)
    body = manifest("pytorchjob.yaml")
    body["metadata"]["name"] = "mixed"
    [master] = body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    master["resources"]["limits"]["nvidia.com/gpu"] = "1"
    create(kube, PYTORCH, body)
    job = waits_and_says_why(kube, "pytorchjob", PYTORCH, "mixed")
    # Its GPUs counted in units of their common divisor; its pod sets kept, each pod's ask.
    assert (job.workers, job.gpus_per_worker, job.gpus) == (25, 1, 25)
    assert [(s["name"], s["pods"], s["gpus"]) for s in job.pod_sets] == [
        ("Master", 1, 1),
        ("Worker", 3, 8),
    ]
    job.refresh_from_db()
    assert job.pending_reason["code"] == "no_capacity"
    assert read(kube, PYTORCH, "mixed")["spec"]["runPolicy"]["suspend"] is True
    assert kube.pods("team-a", selector="training.kubeflow.org/job-name=mixed") == []

    cancel_job(world.carol, full)
    kube.sync_until(lambda: not kube.pods("team-a", selector=f"gpuqueue.dev/job-id={full.pk}"))
    admit(kube, job)
    job.refresh_from_db()
    pods = kube.pods("team-a", selector="training.kubeflow.org/job-name=mixed")
    assert len(pods) == 4 and all(p["status"]["phase"] == "Running" for p in pods)
    by_type = {
        p["metadata"]["labels"]["training.kubeflow.org/replica-type"]: p["spec"]["nodeName"]
        for p in pods
        if p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "master"
    }
    busy.refresh_from_db()
    [busy_node] = busy.placement
    assert by_type == {"master": busy_node}
    workers = [
        p["spec"]["nodeName"]
        for p in pods
        if p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"
    ]
    assert len(set(workers)) == 3 and busy_node not in workers
    # As planned, pod by pod; the placement counts its GPUs per node.
    assert Counter(p["spec"]["nodeName"] for p in pods) == Counter(job.pod_nodes)
    assert job.placement == {busy_node: 1, **{node: 8 for node in workers}}
