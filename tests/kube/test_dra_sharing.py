"""On a real control plane: fractions of a GPU of a shared DRA flavor share one ResourceClaim.

The DRA nodes, ResourceSlices and the NVIDIA driver's DeviceClasses are test_dra.py's (two
nodes of 4 H200). gpuqueue packs quarter-GPU jobs on one GPU; their pods name one claim for
one device with the driver's sharing configuration, kube-scheduler allocates it on the planned
node, and the claim goes when the last sharer stops. Another team's quarter gets a GPU (and a
claim) of its own, and devices that a pod gpuqueue did not make holds are planned around.
What only a real GPU shows (the driver applying time-slicing or MPS) is not tested here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from gpuqueue.cluster import dra_sharing
from gpuqueue.cluster import k8s_shared_claims as shared_claims
from gpuqueue.cluster.base import LaunchSpec
from gpuqueue.cluster.k8s_calls import Caller
from gpuqueue.cluster.kubernetes import KubernetesBackend
from gpuqueue.cluster.manifests import ClusterOptions
from gpuqueue.cluster.records import shared_claim_proof_of
from gpuqueue.core.states import JobState
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Flavor, Job, Node, Quota
from tests.kube.conftest import Kube

# The admission tests' fixtures (a guarded team namespace, the policy, gpuqueue's account).
from tests.kube.test_admission import GUARDED, guard, guarded  # noqa: F401
from tests.kube.test_dra import (  # noqa: F401 -- the module's DRA cluster fixture
    DRIVER,
    H200,
    LONG,
    claims,
    dra_cluster,
    others_pod_with_claim,
    pods_of,
    running,
    settle_devices,
)

FLAVOR = "h200-shared"
RESOURCE = f"dra.gpuqueue.dev/{FLAVOR}"


@pytest.fixture
def shared(
    kube: Kube,
    world: Any,
    dra_cluster: client.ResourceV1Api,  # noqa: F811 -- the fixture imported above
) -> Iterator[Flavor]:
    flavor = Flavor.objects.create(
        name=FLAVOR,
        device_class="gpu.nvidia.com",
        device_selector=f"device.attributes['{DRIVER}'].productName == '{H200}'",
        shareable=True,
        slices_per_gpu=4,
        sharing_strategy="TimeSlicing",
    )
    for team in (world.team_a, world.team_b):
        Quota.objects.create(team=team, flavor=flavor, guarantee=4, limit=8)
    settle_devices(kube, dra_cluster)
    kube.sync_until(lambda: Node.objects.get(name="dra-0").capacity == {RESOURCE: 4})
    yield flavor
    for namespace in ("others", "team-a", "team-b"):
        dra_cluster.delete_collection_namespaced_resource_claim(namespace)


def quarter(submit: Any, flavor: Flavor, **kw: Any) -> Job:
    return submit(flavor=flavor, gpu_milli=250, annotations=LONG, **kw)


def claim_of(pod: dict[str, Any]) -> str:
    [ref] = pod["spec"]["resourceClaims"]
    return str(ref["resourceClaimName"])


def read_claim(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    for one in claims(kube, namespace):
        if one["metadata"]["name"] == name:
            return one
    return None


def test_four_quarters_share_one_claim_on_one_device_and_the_last_one_out_deletes_it(
    kube: Kube, submit: Any, shared: Flavor, world: Any
) -> None:
    jobs = [quarter(submit, shared) for _ in range(4)]
    assert sorted(run_cycle(backend=kube.backend).admitted) == sorted(j.pk for j in jobs)
    devices = {tuple(map(tuple, Job.objects.get(pk=j.pk).gpu_devices)) for j in jobs}
    [[(node, index)]] = devices  # one GPU of one node, as gpuqueue packed them
    kube.sync_until(lambda: running(*jobs), timeout=60)
    name = dra_sharing.claim_name(FLAVOR, node, index)
    pods = [pod for job in jobs for pod in pods_of(kube, job)]
    assert {claim_of(p) for p in pods} == {name}
    assert {p["spec"]["nodeName"] for p in pods} == {node}
    [claim] = claims(kube, "team-a")
    # One device of the planned node, allocated once, reserved for the four pods.
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["driver"]) for r in results] == [(node, DRIVER)]
    assert {r["name"] for r in claim["status"]["reservedFor"]} == {
        p["metadata"]["name"] for p in pods
    }
    [config] = claim["spec"]["devices"]["config"]
    assert config["opaque"]["driver"] == DRIVER
    assert config["opaque"]["parameters"]["kind"] == "GpuConfig"
    assert config["opaque"]["parameters"]["sharing"] == {"strategy": "TimeSlicing"}
    # Proven gpuqueue's, and owned by the four attempts' Secrets.
    assert claim["metadata"]["annotations"]["gpuqueue.dev/proof"] == shared_claim_proof_of(
        "team-a", name, kube.backend.instance
    )
    assert len(dra_sharing.owners(claim)) == 4
    # Kubernetes' own components (the garbage collector, the DRA controllers, kubectl) write
    # it with patches the API server re-encodes: its opaque configuration must survive that.
    client.ResourceV1Api(kube.api).patch_namespaced_resource_claim(
        name, "team-a", [{"op": "add", "path": "/metadata/labels/probe", "value": "patched"}]
    )
    # Three stop: the claim stays for the fourth; the fourth stops: it goes.
    for job in jobs[:3]:
        kube.backend.stop(job.pk, Job.objects.get(pk=job.pk).attempts)
    after = read_claim(kube, "team-a", name)
    assert after is not None and not dra_sharing.terminating(after)
    assert len(dra_sharing.owners(after)) == 1
    kube.backend.stop(jobs[3].pk, Job.objects.get(pk=jobs[3].pk).attempts)
    kube.wait(lambda: read_claim(kube, "team-a", name) is None, timeout=60)


def test_another_teams_quarter_gets_a_gpu_and_a_claim_of_its_own(
    kube: Kube, submit: Any, shared: Flavor, world: Any
) -> None:
    """A claim lives in one namespace: team B's quarter is not packed on team A's GPU, and
    kube-scheduler gives its claim another device of the same node."""
    mine = quarter(submit, shared)
    theirs = quarter(submit, shared, team=world.team_b, user=world.carol)
    assert sorted(run_cycle(backend=kube.backend).admitted) == sorted([mine.pk, theirs.pk])
    kube.sync_until(lambda: running(mine, theirs), timeout=60)
    gpus = [tuple(Job.objects.get(pk=j.pk).gpu_devices[0]) for j in (mine, theirs)]
    assert gpus[0][0] == gpus[1][0] and gpus[0][1] != gpus[1][1]
    [a], [b] = claims(kube, "team-a"), claims(kube, "team-b")
    for job, claim, (node, index) in zip((mine, theirs), (a, b), gpus, strict=True):
        assert claim["metadata"]["name"] == dra_sharing.claim_name(FLAVOR, node, index)
        assert [claim_of(p) for p in pods_of(kube, job)] == [claim["metadata"]["name"]]
    devices = [c["status"]["allocation"]["devices"]["results"][0]["device"] for c in (a, b)]
    assert devices[0] != devices[1]


def test_a_device_another_pods_claim_holds_is_planned_around(
    kube: Kube, submit: Any, shared: Flavor
) -> None:
    """Someone's pod holds the 4 GPUs of dra-0 by its own claim: a quarter, which would open
    the first GPU of dra-0 otherwise, goes to dra-1, where its claim is allocated."""
    others_pod_with_claim(kube, "dra-0", 4)
    kube.sync_until(lambda: Node.objects.get(name="dra-0").used_externally == {RESOURCE: 4})
    job = quarter(submit, shared)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]
    assert Job.objects.get(pk=job.pk).gpu_devices == [["dra-1", 0]]
    kube.sync_until(lambda: running(job), timeout=60)
    [pod] = pods_of(kube, job)
    assert pod["spec"]["nodeName"] == "dra-1"
    [claim] = claims(kube, "team-a")
    assert claim_of(pod) == claim["metadata"]["name"] == dra_sharing.claim_name(FLAVOR, "dra-1", 0)
    assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == "dra-1"
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


def test_a_claim_under_a_shared_gpus_name_that_gpuqueue_did_not_make_is_not_joined(
    kube: Kube, submit: Any, shared: Flavor
) -> None:
    """Someone made a claim under the name of the GPU a quarter is packed on (any device, any
    configuration): the launch neither joins nor deletes it; the start fails and is retried."""
    name = dra_sharing.claim_name(FLAVOR, "dra-0", 0)
    resource = client.ResourceV1Api(kube.api)
    resource.create_namespaced_resource_claim(
        "team-a",
        {
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                }
            },
        },
    )
    job = quarter(submit, shared)
    assert run_cycle(backend=kube.backend).admitted == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.start_failures == 1
    [theirs] = claims(kube, "team-a")
    assert dra_sharing.owners(theirs) == [] and not pods_of(kube, job)


def test_under_deploys_rbac_and_policy_gpuqueue_shares_a_claim_and_the_last_one_out_deletes_it(
    kube: Kube, request: pytest.FixtureRequest, shared: Flavor
) -> None:
    """As gpuqueue's own ServiceAccount, with deploy/'s admission policy installed: two
    quarters of one GPU create and join its claim, their pods bind with it on the planned node,
    and leaving it takes an owner off, then deletes it (create, get, update, list, delete)."""
    backend = KubernetesBackend(
        request.getfixturevalue("guarded"),
        options=ClusterOptions(public_url="http://gpuqueue.test"),
        caller=Caller(attempts=1, backoff_seconds=0),
        namespaces=lambda: [GUARDED],
        dra_flavors=lambda: [],
    )
    name = dra_sharing.claim_name(FLAVOR, "dra-0", 0)
    launched = [
        backend.launch(
            LaunchSpec(
                job_id=job_id,
                attempt=1,
                team="guarded",
                namespace=GUARDED,
                name="notebook",
                image="ghcr.io/acme/notebook:1",
                command=[],
                env={},
                labels={},
                annotations={},
                workers=1,
                gpus_per_worker=1,
                resource_name=RESOURCE,
                placement={"dra-0": 1},
                checkpoint_grace_seconds=30,
                max_runtime_seconds=None,
                device_class="gpu.nvidia.com",
                device_selector=shared.device_selector,
                shared_claim=name,
                shared_gpu=("dra-0", 0),
                sharing_strategy="MPS",
            )
        )
        for job_id in (990201, 990202)
    ]

    def bound() -> bool:
        pods = kube.pods(GUARDED, selector="gpuqueue.dev/job-id in (990201,990202)")
        return len(pods) == 2 and all(p["spec"].get("nodeName") == "dra-0" for p in pods)

    kube.wait(bound, timeout=30)
    [claim] = claims(kube, GUARDED)
    assert claim["metadata"]["name"] == name
    assert sorted(dra_sharing.owners(claim)) == sorted(one.secret_uid for one in launched)
    assert claim["spec"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"] == {
        "strategy": "MPS"
    }
    shared_claims.leave(backend, GUARDED, launched[0].secret_uid)
    [claim] = claims(kube, GUARDED)
    assert dra_sharing.owners(claim) == [launched[1].secret_uid]
    shared_claims.leave(backend, GUARDED, launched[1].secret_uid)
    kube.wait(
        lambda: not claims(kube, GUARDED) or dra_sharing.terminating(claims(kube, GUARDED)[0])
    )


def test_a_quarter_launched_while_its_gpus_claim_is_still_being_deleted_waits_for_it(
    kube: Kube, submit: Any, shared: Flavor
) -> None:
    """The last sharer of a GPU stops and its claim is deleted, but something (here a test
    finalizer, in life the pod's grace) keeps it: a quarter packed on that GPU meanwhile is
    not launched against it; it starts, with a new claim, once the old one is gone."""
    first = quarter(submit, shared)
    assert run_cycle(backend=kube.backend).admitted == [first.pk]
    kube.sync_until(lambda: running(first), timeout=60)
    name = dra_sharing.claim_name(FLAVOR, "dra-0", 0)
    before = read_claim(kube, "team-a", name)
    assert before is not None
    set_finalizers(kube, name, [*before["metadata"].get("finalizers", []), HOLD])
    kube.backend.stop(first.pk, Job.objects.get(pk=first.pk).attempts)
    Job.objects.filter(pk=first.pk).update(state=JobState.CANCELLED)
    second = quarter(submit, shared)
    assert run_cycle(backend=kube.backend).admitted == [second.pk]
    assert Job.objects.get(pk=second.pk).gpu_devices == [["dra-0", 0]]
    for _ in range(3):
        sync_cluster(kube.backend)
    assert Job.objects.get(pk=second.pk).state == JobState.ADMITTED
    assert not pods_of(kube, second)
    terminating = read_claim(kube, "team-a", name)
    assert terminating is not None and dra_sharing.terminating(terminating)
    set_finalizers(kube, name, [f for f in terminating["metadata"]["finalizers"] if f != HOLD])
    kube.sync_until(lambda: running(second), timeout=60)
    new = read_claim(kube, "team-a", name)
    assert new is not None and new["metadata"]["uid"] != before["metadata"]["uid"]


HOLD = "test.gpuqueue.dev/hold"


def set_finalizers(kube: Kube, name: str, finalizers: list[str]) -> None:
    """A JSON patch of the claim's finalizers alone (a merge patch is refused: its spec is
    immutable, and the client's merge sends it whole)."""
    client.ResourceV1Api(kube.api).patch_namespaced_resource_claim(
        name,
        "team-a",
        [{"op": "replace", "path": "/metadata/finalizers", "value": finalizers}],
    )
