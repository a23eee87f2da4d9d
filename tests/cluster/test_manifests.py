"""The Job, Service and Secret one attempt becomes: golden files, validated through the
official client's models. Regenerate the golden files with GPUQUEUE_UPDATE_GOLDEN=1."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.base import LaunchSpec

GOLDEN = Path(__file__).parent / "golden"
OPTIONS = mf.ClusterOptions(
    gpu_taint="nvidia.com/gpu",
    master_port=29500,
    public_url="https://gpuqueue.example.com/",
    priority_class="gpuqueue-workload",
    node_lost_grace_seconds=600.5,
    finished_ttl_seconds=172800,
)
SPEC = LaunchSpec(
    job_id=42,
    attempt=2,
    team="team-a",
    namespace="team-a",
    name="llama-finetune",
    image="ghcr.io/acme/train:1.4",
    command=["python", "train.py", "--epochs", "3"],
    env={
        "GPUQUEUE_RESUME": "1",
        "GPUQUEUE_ATTEMPT": "2",
        "GPUQUEUE_CHECKPOINT": "s3://ckpt/job-42/step-900",
        "LR": "0.0003",
    },
    labels={"project": "llama"},
    annotations={"owner": "alice"},
    workers=2,
    gpus_per_worker=4,
    resource_name="nvidia.com/gpu",
    placement={"gpu-node-b": 1, "gpu-node-a": 1},
    checkpoint_grace_seconds=120,
    max_runtime_seconds=86400,
    checkpoint_location="s3://ckpt/job-42/step-900",
    cpu_millicores=48000,
    memory_mib=393216,
    cpu_limit_millicores=48000,
    volumes=(
        {"claim": "imagenet", "mount_path": "/data", "read_only": True},
        {"claim": "team-a-scratch", "mount_path": "/scratch", "read_only": False},
    ),
    image_pull_secrets=("ghcr-pull",),
    env_from_secrets=("wandb",),
)
HOSTNAMES = {"gpu-node-a": "gpu-node-a", "gpu-node-b": "gpu-node-b"}
MODELS = {"Job": client.V1Job, "Service": client.V1Service, "Secret": client.V1Secret}


def built() -> dict[str, dict[str, Any]]:
    return {
        "job": mf.job_manifest(SPEC, OPTIONS, HOSTNAMES),
        "service": mf.service_manifest(SPEC),
        "secret": mf.secret_manifest(SPEC, "gqj_42_not-a-real-token"),
    }


@pytest.mark.parametrize("kind", ["job", "service", "secret"])
def test_the_manifest_matches_its_golden_file(kind: str) -> None:
    manifest = built()[kind]
    path = GOLDEN / f"{kind}.yaml"
    if os.environ.get("GPUQUEUE_UPDATE_GOLDEN"):
        path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    assert manifest == yaml.safe_load(path.read_text())


@pytest.mark.parametrize("kind", ["job", "service", "secret"])
def test_the_golden_file_survives_a_round_trip_through_the_client_models(kind: str) -> None:
    """A misspelt or misplaced field would be dropped by the model and show up here."""
    golden = yaml.safe_load((GOLDEN / f"{kind}.yaml").read_text())
    model = MODELS[golden["kind"]].from_dict(golden)
    assert client.ApiClient().sanitize_for_serialization(model) == golden


def test_the_job_is_an_indexed_gang_pinned_to_the_planned_nodes() -> None:
    job = built()["job"]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == 2
    assert spec["activeDeadlineSeconds"] == 86400 and pod["terminationGracePeriodSeconds"] == 120
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0] == {
        "key": "kubernetes.io/hostname",
        "operator": "In",
        "values": ["gpu-node-a", "gpu-node-b"],
    }
    assert pod["tolerations"][0] == {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    # Created gated, carrying the plan: worker i runs in the i-th slot.
    assert pod["schedulingGates"] == [{"name": mf.PLACEMENT_GATE}]
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    slots = [["gpu-node-a", 1], ["gpu-node-b", 1]]
    assert json.loads(annotations[mf.PLACEMENT_ANNOTATION]) == slots
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["WORLD_SIZE"]["value"] == "2"
    assert env["MASTER_ADDR"]["value"] == "gq-42-2-0.gq-42-2.team-a.svc"
    assert env["GPUQUEUE_CHECKPOINT"]["value"] == "s3://ckpt/job-42/step-900"
    assert env["GPUQUEUE_JOB_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "gq-42-2-token"


def pod_of(spec: LaunchSpec) -> dict[str, Any]:
    return mf.job_manifest(spec, OPTIONS, HOSTNAMES)["spec"]["template"]["spec"]


def test_a_single_worker_has_no_service_no_gate_and_is_its_own_master() -> None:
    alone = replace(SPEC, workers=1, placement={"gpu-node-a": 1})
    pod = mf.job_manifest(alone, OPTIONS, {})["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert not mf.has_service(alone) and mf.has_service(SPEC)
    assert "subdomain" not in pod
    assert env["MASTER_ADDR"]["value"] == "127.0.0.1"
    # One pod cannot land half-way: pinned from the start, no gate to release.
    assert "schedulingGates" not in pod
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-a"}
    gang = mf.job_manifest(SPEC, OPTIONS, {})["spec"]["template"]["spec"]
    assert gang["schedulingGates"] == [{"name": mf.PLACEMENT_GATE}] and "nodeSelector" not in gang
    assert mf.job_manifest(SPEC, OPTIONS, {})["spec"]["template"]["spec"]["subdomain"] == "gq-42-2"


def test_each_worker_gets_the_flavor_s_cpu_and_memory_a_dev_shm_and_no_api_token() -> None:
    pod = pod_of(replace(SPEC, cpu_limit_millicores=0))
    resources = pod["containers"][0]["resources"]
    assert resources["requests"] == {"nvidia.com/gpu": "4", "cpu": "48000m", "memory": "393216Mi"}
    assert resources["limits"] == {"nvidia.com/gpu": "4", "memory": "393216Mi"}  # Burstable
    (shm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "196608Mi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]
    assert pod["automountServiceAccountToken"] is False
    bare = mf.job_manifest(
        replace(SPEC, cpu_millicores=0, memory_mib=0, cpu_limit_millicores=0), OPTIONS, HOSTNAMES
    )
    bare_resources = bare["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert bare_resources["requests"] == bare_resources["limits"] == {"nvidia.com/gpu": "4"}


def test_limits_equal_to_the_requests_make_the_pod_guaranteed() -> None:
    resources = pod_of(SPEC)["containers"][0]["resources"]
    assert resources["limits"] == resources["requests"]
    assert resources["limits"] == {"nvidia.com/gpu": "4", "cpu": "48000m", "memory": "393216Mi"}


def test_a_memory_limit_above_the_request_and_a_cpu_limit_of_its_own() -> None:
    spec = replace(SPEC, cpu_limit_millicores=64000, memory_limit_mib=500000)
    resources = pod_of(spec)["containers"][0]["resources"]
    assert resources["requests"] == {"nvidia.com/gpu": "4", "cpu": "48000m", "memory": "393216Mi"}
    assert resources["limits"] == {"nvidia.com/gpu": "4", "cpu": "64000m", "memory": "500000Mi"}


def test_dev_shm_takes_the_job_s_size_else_half_the_memory_request() -> None:
    def shm(spec: LaunchSpec) -> dict[str, Any]:
        (volume,) = [v for v in pod_of(spec)["volumes"] if v["name"] == "dshm"]
        return dict(volume["emptyDir"])

    assert shm(replace(SPEC, shm_mib=1024)) == {"medium": "Memory", "sizeLimit": "1024Mi"}
    assert shm(replace(SPEC, memory_limit_mib=500000)) == {
        "medium": "Memory",
        "sizeLimit": "196608Mi",
    }
    assert shm(replace(SPEC, memory_mib=0)) == {"medium": "Memory"}


def test_each_volume_is_its_claim_mounted_at_its_path() -> None:
    pod = pod_of(SPEC)
    claims = {
        v["name"]: v["persistentVolumeClaim"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert [
        (c["claimName"], mounts[n]["mountPath"], mounts[n]["readOnly"]) for n, c in claims.items()
    ] == [
        ("imagenet", "/data", True),
        ("team-a-scratch", "/scratch", False),
    ]
    assert all(c["readOnly"] == mounts[n]["readOnly"] for n, c in claims.items())
    assert not any(
        "persistentVolumeClaim" in v for v in pod_of(replace(SPEC, volumes=()))["volumes"]
    )


def test_secrets_are_passed_on_by_name_and_gpuqueue_s_variables_still_win() -> None:
    pod = pod_of(SPEC)
    assert pod["imagePullSecrets"] == [{"name": "ghcr-pull"}]
    container = pod["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "wandb"}}]
    # Kubernetes lets `env` override `envFrom`: RANK and the token stay gpuqueue's.
    assert {"RANK", "GPUQUEUE_JOB_TOKEN"} <= {e["name"] for e in container["env"]}
    bare = pod_of(replace(SPEC, image_pull_secrets=(), env_from_secrets=()))
    assert "imagePullSecrets" not in bare and "envFrom" not in bare["containers"][0]


def test_pods_are_restricted_by_default_and_a_service_account_brings_its_token() -> None:
    pod = pod_of(SPEC)
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert pod["priorityClassName"] == "gpuqueue-workload"  # the install's, by default
    acting = pod_of(replace(SPEC, service_account="trainer", priority_class="gpu-high"))
    assert acting["serviceAccountName"] == "trainer"
    assert acting["automountServiceAccountToken"] is True
    assert acting["priorityClassName"] == "gpu-high"
    full = mf.job_manifest(
        replace(SPEC, service_account="trainer", priority_class="gpu-high"), OPTIONS, HOSTNAMES
    )
    model = client.V1Job.from_dict(full)  # no misspelt field dropped on the way
    assert client.ApiClient().sanitize_for_serialization(model) == full


def test_a_failed_worker_fails_the_job_but_a_disrupted_one_does_not() -> None:
    rules = built()["job"]["spec"]["podFailurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["Ignore", "FailJob"]
    assert built()["job"]["spec"]["backoffLimit"] == 0


def test_the_user_cannot_override_gpuqueue_labels_or_rank() -> None:
    spec = replace(
        SPEC, labels={mf.LABEL_JOB_ID: "7", mf.MANAGED_BY: "me"}, env={"RANK": "0", "A": "1"}
    )
    job = mf.job_manifest(spec, OPTIONS, HOSTNAMES)
    assert mf.attempt_of(job) == (42, 2)
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env].count("RANK") == 1
    assert "valueFrom" in next(e for e in env if e["name"] == "RANK")


def test_without_a_max_runtime_there_is_no_deadline_and_names_are_dns_labels() -> None:
    spec = replace(SPEC, max_runtime_seconds=None, job_id=10**12, attempt=999)
    job = mf.job_manifest(spec, OPTIONS, HOSTNAMES)
    assert "activeDeadlineSeconds" not in job["spec"]
    for name in (job["metadata"]["name"], mf.token_secret_name(spec.job_id, spec.attempt)):
        assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name)


def test_the_checkpoint_patch_carries_the_deadline_in_rfc_3339() -> None:
    from datetime import UTC, datetime

    patch = mf.checkpoint_patch(datetime(2026, 11, 22, 10, 30, 5, tzinfo=UTC))
    assert patch == {
        "metadata": {"annotations": {mf.CHECKPOINT_ANNOTATION: "2026-11-22T10:30:05Z"}}
    }


def test_workers_keep_their_node_through_kube_scheduler_preemption_autoscalers_and_node_loss() -> (
    None
):
    """The PriorityClass keeps kube-scheduler's preemption off the workers; the annotations keep
    autoscalers from evicting one worker of a gang; the node-loss tolerations last gpuqueue's
    grace, not Kubernetes' 300 s; the GPU taint is tolerated for scheduling only, so a NoExecute
    taint on a GPU node still evicts; Kubernetes deletes a Job gpuqueue forgot."""
    spec = replace(SPEC, annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"})
    job = mf.job_manifest(spec, OPTIONS, HOSTNAMES)
    template = job["spec"]["template"]
    assert template["spec"]["priorityClassName"] == "gpuqueue-workload"
    assert template["metadata"]["annotations"][
        "cluster-autoscaler.kubernetes.io/safe-to-evict"
    ] == ("false")
    assert template["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert template["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        *(
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 601}
            for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        ),
    ]
    assert job["spec"]["ttlSecondsAfterFinished"] == 172800
    # A job that names a PriorityClass of its own (from GPUQUEUE_PRIORITY_CLASSES) keeps it.
    named = mf.job_manifest(replace(SPEC, priority_class="research-high"), OPTIONS, HOSTNAMES)
    assert named["spec"]["template"]["spec"]["priorityClassName"] == "research-high"
    # Without the options: no class, Kubernetes' default tolerations and no TTL.
    bare = mf.job_manifest(SPEC, mf.ClusterOptions(), HOSTNAMES)
    assert "priorityClassName" not in bare["spec"]["template"]["spec"]
    assert "ttlSecondsAfterFinished" not in bare["spec"]
    assert bare["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_a_shared_flavor_s_worker_asks_its_slices_and_a_model_bound_job_its_models() -> None:
    spec = replace(
        SPEC,
        resource_name="nvidia.com/gpu.shared",
        gpus_per_worker=1,
        resource_count=1,
        gpu_models=("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"),
    )
    pod = pod_of(spec)
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu.shared"] == "1"
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node-a", "gpu-node-b"]},
        {
            "key": "nvidia.com/gpu.product",
            "operator": "In",
            "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"],
        },
    ]
    # No field misspelt or misplaced: the client's model keeps every one.
    manifest = json.loads(json.dumps(mf.job_manifest(spec, OPTIONS, HOSTNAMES)))
    model = client.V1Job.from_dict(manifest)
    assert client.ApiClient().sanitize_for_serialization(model) == manifest
