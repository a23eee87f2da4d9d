"""The shared claim of a DRA GPU, pure: its name, its sharing configuration, its owners, and
the proof that tells gpuqueue's from one a tenant made under the same name."""

from __future__ import annotations

import re

import pytest

from gpuqueue.cluster import dra_sharing as ds
from gpuqueue.cluster.proof import install_key, is_our_shared_claim, shared_claim_proof

KEY = install_key("secret", "gpuqueue")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def secret(uid: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"s-{uid}", "uid": uid}}


def manifest(strategy: str = "MPS", selector: str = "") -> dict[str, object]:
    name = ds.claim_name("h200-shared", "dra-0", 1)
    return ds.claim_manifest(
        name=name,
        namespace="team-a",
        node="dra-0",
        index=1,
        device_class="gpu.nvidia.com",
        device_selector=selector,
        strategy=strategy,
        instance="gpuqueue",
        proof=shared_claim_proof(KEY, "team-a", name, "gpuqueue"),
        owner=secret("u1"),
    )


def test_a_claim_name_is_one_per_gpu_and_always_one_the_api_takes() -> None:
    assert ds.claim_name("h200-shared", "dra-0", 1) == "gq-gpu-h200-shared-dra-0-1"
    long = ds.claim_name("f", "node." * 60, 3)
    assert len(long) <= 253 and DNS_SUBDOMAIN.match(long)
    assert long != ds.claim_name("f", "node." * 60, 4)  # the digest keeps GPUs apart


def test_the_claim_asks_one_device_with_nvidias_sharing_configuration() -> None:
    body = manifest("MPS", "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'")
    devices = body["spec"]["devices"]  # type: ignore[index]
    [request] = devices["requests"]
    assert request["exactly"]["count"] == 1
    assert request["exactly"]["selectors"][0]["cel"]["expression"].endswith("'NVIDIA H200'")
    [config] = devices["config"]
    assert config["requests"] == [request["name"]]
    assert config["opaque"]["driver"] == "gpu.nvidia.com"
    assert config["opaque"]["parameters"] == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS"},
    }
    with pytest.raises(ValueError, match="sharing strategy"):
        manifest("Spatial")


def test_sharers_join_and_leave_as_owners() -> None:
    claim = manifest()
    joined = ds.with_owner(ds.with_owner(claim, secret("u2")), secret("u2"))
    assert ds.owners(joined) == ["u1", "u2"]
    assert ds.owners(ds.without_owner(joined, "u1")) == ["u2"]
    assert ds.owners(claim) == ["u1"]  # the claim read is not changed


def test_only_a_claim_with_the_proof_of_its_namespace_and_name_is_gpuqueues() -> None:
    claim = manifest()
    name = ds.claim_name("h200-shared", "dra-0", 1)
    seal = shared_claim_proof(KEY, "team-a", name, "gpuqueue")
    assert is_our_shared_claim(claim, "team-a", name, seal)
    other_name = ds.claim_name("h200-shared", "dra-0", 2)
    assert not is_our_shared_claim(claim, "team-a", other_name, seal)
    # The proof of another namespace's claim, copied: it names that namespace.
    assert not is_our_shared_claim(
        claim, "team-a", name, shared_claim_proof(KEY, "team-b", name, "gpuqueue")
    )
    stripped = {**claim, "metadata": {**claim["metadata"], "annotations": {}}}  # type: ignore[dict-item]
    assert not is_our_shared_claim(stripped, "team-a", name, seal)
