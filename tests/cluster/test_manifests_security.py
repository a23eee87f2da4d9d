"""What a worker may touch on its node, as the manifests say it: devices only through the device
plugin (the reserved variables pinned after every Secret), and the flavor's security profile."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kubernetes import client

from gpuqueue.cluster import manifests as mf
from tests.cluster.test_manifests import HOSTNAMES, OPTIONS, SPEC


def _pod(**changes: Any) -> dict[str, Any]:
    job = mf.job_manifest(replace(SPEC, **changes), OPTIONS, HOSTNAMES)
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _env(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["containers"][0]["env"]}


def test_the_visible_devices_are_pinned_in_env_which_wins_over_every_secret() -> None:
    pod = _pod(env_from_secrets=("wandb", "ngc"))
    container = pod["containers"][0]
    assert container["envFrom"] == [
        {"secretRef": {"name": "wandb"}},
        {"secretRef": {"name": "ngc"}},
    ]
    # Kubernetes applies envFrom first and env over it: the explicit entry is what counts.
    assert _env(pod)["NVIDIA_VISIBLE_DEVICES"] == "void"
    names = [e["name"] for e in container["env"]]
    assert names.count("NVIDIA_VISIBLE_DEVICES") == 1


def test_a_reserved_variable_kept_from_an_older_job_is_dropped() -> None:
    env = {**SPEC.env, "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_MOFED": "enabled", "LR": "1"}
    pod = _pod(env=env)
    found = _env(pod)
    assert found["NVIDIA_VISIBLE_DEVICES"] == "void" and "NVIDIA_MOFED" not in found
    assert found["LR"] == "1"


def test_by_default_workers_pass_pod_security_restricted() -> None:
    pod = _pod()
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_a_profile_sets_the_ids_and_stays_non_root() -> None:
    pod = _pod(run_as_user=1000, run_as_group=1000, fs_group=2000)
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 2000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_root_allowed_leaves_run_as_non_root_out_but_keeps_the_rest() -> None:
    pod = _pod(allow_root=True, run_as_user=0, fs_group=0)
    assert pod["securityContext"] == {
        "runAsUser": 0,
        "fsGroup": 0,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_each_profile_survives_the_client_models() -> None:
    for changes in ({}, {"run_as_user": 1000, "fs_group": 1000}, {"allow_root": True}):
        job = mf.job_manifest(replace(SPEC, **changes), OPTIONS, HOSTNAMES)
        model = client.V1Job.from_dict(job)
        assert client.ApiClient().sanitize_for_serialization(model) == job


def test_with_the_pin_off_the_device_plugin_s_variable_is_left_alone() -> None:
    """For a device plugin whose list is NVIDIA_VISIBLE_DEVICES itself (envvar strategy)."""
    options = replace(OPTIONS, pin_visible_devices=False)
    job = mf.job_manifest(
        replace(SPEC, env={**SPEC.env, "NVIDIA_VISIBLE_DEVICES": "all"}), options, HOSTNAMES
    )
    names = [e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert "NVIDIA_VISIBLE_DEVICES" not in names  # neither pinned nor the job's
