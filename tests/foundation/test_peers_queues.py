"""The Kueue objects benchmarks/peers makes of gpuqueue's quotas say what the quotas say."""

from __future__ import annotations

from benchmarks.peers.kueue import COHORT, QUEUE, TeamQuota, job_manifest, queue_objects

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
