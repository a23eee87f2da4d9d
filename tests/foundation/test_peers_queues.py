"""The Kueue objects benchmarks/peers makes of gpuqueue's quotas say what the quotas say."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from benchmarks.peers import shapes
from benchmarks.peers.kueue import (
    COHORT,
    QUEUE,
    TeamQuota,
    job_manifest,
    queue_objects,
    quotas_of,
)

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


def quotas() -> list[TeamQuota]:
    return [
        TeamQuota("team-a", "ns-a", "h100", "nvidia.com/gpu", guarantee=24, limit=40, weight=2),
        TeamQuota("team-a", "ns-a", "a100", "nvidia.com/gpu", guarantee=8, limit=8, weight=2),
        TeamQuota("team-b", "ns-b", "h100", "nvidia.com/gpu", guarantee=16, limit=40),
    ]


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_flavors_carry_their_node_labels() -> None:
    flavors = by_kind(queue_objects(quotas(), {"h100": H100, "a100": A100}), "ResourceFlavor")
    assert flavors["h100"]["spec"]["nodeLabels"] == H100
    assert flavors["a100"]["spec"]["nodeLabels"] == A100


def test_cluster_queues_carry_guarantee_borrowing_and_weight() -> None:
    queues = by_kind(queue_objects(quotas(), {"h100": H100, "a100": A100}), "ClusterQueue")
    a, b = queues["team-a"]["spec"], queues["team-b"]["spec"]
    assert a["cohortName"] == b["cohortName"] == COHORT
    assert a["fairSharing"] == {"weight": "2"} and b["fairSharing"] == {"weight": "1"}

    def quota(spec: dict) -> dict[str, tuple[str, str]]:
        (group,) = spec["resourceGroups"]
        assert group["coveredResources"] == ["nvidia.com/gpu"]
        return {
            f["name"]: (f["resources"][0]["nominalQuota"], f["resources"][0]["borrowingLimit"])
            for f in group["flavors"]
        }

    assert quota(a) == {"a100": ("8", "0"), "h100": ("24", "16")}
    # No quota of a flavor: nothing of it, lent or borrowed, as gpuqueue admits nothing there.
    assert quota(b) == {"a100": ("0", "0"), "h100": ("16", "24")}


def test_each_team_namespace_has_its_local_queue() -> None:
    objects = queue_objects(quotas(), {"h100": H100, "a100": A100})
    local = [o for o in objects if o["kind"] == "LocalQueue"]
    assert {(o["metadata"]["namespace"], o["spec"]["clusterQueue"]) for o in local} == {
        ("ns-a", "team-a"),
        ("ns-b", "team-b"),
    }
    assert {o["metadata"]["name"] for o in local} == {QUEUE}


def test_a_gang_is_one_suspended_job_of_all_its_workers() -> None:
    job = job_manifest("g", "ns-a", workers=8, gpus=8, labels={"run": "x"}, annotations={})
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 8
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"nvidia.com/gpu": "8"}


def test_a_preempted_pod_of_kueue_gets_the_same_grace_as_gpuqueue_s_checkpoint() -> None:
    job = job_manifest("g", "ns-a", 1, 8, labels={}, annotations={}, grace_seconds=5)
    assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 5
    assert shapes.contended().grace_seconds == 5


def rows(specs: tuple[shapes.TeamSpec, ...]) -> list[SimpleNamespace]:
    """Quota rows as the benchmark's build_teams writes them (namespace = slug, flavor h100)."""
    flavor = SimpleNamespace(name="h100", resource_name="nvidia.com/gpu")
    return [
        SimpleNamespace(
            team=SimpleNamespace(slug=s.slug, namespace=s.slug),
            flavor=flavor,
            guarantee=s.guarantee,
            limit=s.limit,
            weight=s.weight,
        )
        for s in specs
    ]


def nominal_and_borrowing(spec: dict) -> tuple[str, str]:
    (group,) = spec["resourceGroups"]
    (flavor,) = group["flavors"]
    (resource,) = flavor["resources"]
    return resource["nominalQuota"], resource["borrowingLimit"]


def test_the_contended_mix_gives_kueue_gpuqueue_s_quotas_and_needs_a_reclaim() -> None:
    scenario = shapes.contended(nodes=16)
    gpus = scenario.nodes * shapes.GPUS_PER_NODE
    queues = by_kind(queue_objects(quotas_of(rows(scenario.teams)), {"h100": H100}), "ClusterQueue")
    assert {name: nominal_and_borrowing(q["spec"]) for name, q in queues.items()} == {
        "team-a": ("48", "80"),
        "team-b": ("48", "80"),
        "team-c": ("32", "96"),
    }
    for q in queues.values():  # one cohort; a queue under its nominal quota takes it back
        assert q["spec"]["cohortName"] == COHORT
        assert q["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
        assert q["spec"]["fairSharing"] == {"weight": "1"}
    assert sum(t.guarantee for t in scenario.teams) == gpus
    (phase,) = scenario.phases
    asked = Counter[str]()
    for job in phase.jobs:
        asked[job.team] += job.workers * job.gpus
    # A and B each ask for the whole cluster; C comes later for exactly its guarantee.
    assert asked == {"team-a": gpus, "team-b": gpus}
    assert {j.team for j in phase.later} == {"team-c"}
    assert sum(j.workers * j.gpus for j in phase.later) == scenario.teams[2].guarantee


def test_kueue_s_baseline_scaled_keeps_its_queues_quotas_and_sizes() -> None:
    scenario = shapes.baseline(scale=10)
    (phase,) = scenario.phases
    assert len(scenario.teams) == 30 and len(phase.jobs) == 1500
    assert scenario.nodes * shapes.GPUS_PER_NODE == 30 * 20  # nominal quotas fill the cluster
    queues = by_kind(queue_objects(quotas_of(rows(scenario.teams)), {"h100": H100}), "ClusterQueue")
    assert {nominal_and_borrowing(q["spec"]) for q in queues.values()} == {("20", "100")}
    sizes = Counter((j.workers * j.gpus, j.seconds) for j in phase.jobs)
    assert sizes == {(1, 2.0): 30 * 35, (5, 5.0): 30 * 10, (20, 10.0): 30 * 5}
    per_queue = Counter(j.team for j in phase.jobs)
    assert set(per_queue.values()) == {50}
