"""Joining and leaving the ResourceClaim that the sharers of one GPU of a shared DRA flavor
share (gpuqueue.cluster.dra_sharing): the Kubernetes backend's calls for it.

A join creates the claim owned by the attempt's Secret, or adds that Secret to the owners of
the one there, only when it is proven gpuqueue's; a leave takes the Secret off every shared claim
it owns and deletes a claim it was the last owner of. Each write carries the claim's
resourceVersion (a delete its uid and resourceVersion), so that a join and a leave of the same
claim never cross: one of them meets a 409, reads the claim again and decides anew.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuqueue.cluster import dra_sharing as ds
from gpuqueue.cluster import proof
from gpuqueue.cluster.base import ClusterError, LaunchSpec, Squatted
from gpuqueue.cluster.k8s_calls import Conflict, NotFound
from gpuqueue.cluster.manifests import MANAGED_BY, MANAGED_BY_VALUE
from gpuqueue.cluster.records import shared_claim_proof_of

if TYPE_CHECKING:
    from gpuqueue.cluster.kubernetes import KubernetesBackend

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TRIES = 3  # reads of a claim another sharer changed meanwhile, before the next sync retries
KIND = "resourceclaim"


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _path(namespace: str, name: str = "") -> str:
    base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    return f"{base}/{name}" if name else base


def _write(backend: KubernetesBackend, method: str, path: str, body: Obj, what: str) -> Obj:
    """Create (POST) or replace (PUT) a claim sent as compact JSON. The API server keeps a
    claim's opaque configuration as the bytes it was sent, and compares them on every later
    write: the Python client's JSON (with spaces) would make each patch by Kubernetes' own
    components (the garbage collector taking an owner off, the DRA controllers, kubectl),
    which send compact JSON, a change of the immutable spec, refused. Sent as YAML (which
    compact JSON is), it is stored as compact JSON."""
    api = backend.resource.api_client

    def send() -> Obj:
        request = api.param_serialize(
            method,
            path,
            header_params={"Content-Type": "application/yaml", "Accept": "application/json"},
            body=json.dumps(body, separators=(",", ":")),
            auth_settings=["BearerToken"],
        )
        response = api.call_api(*request, _request_timeout=backend.timeout)
        response.read()
        if response.status >= 400:
            raise ApiException.from_response(
                http_resp=response, body=response.data.decode(errors="replace"), data=None
            )
        return dict(json.loads(response.data))

    return backend.call(what, send)


def join(backend: KubernetesBackend, spec: LaunchSpec, owner: Obj) -> Obj:
    """The GPU's shared claim, with the attempt's Secret (`owner`) among its owners.

    1. Create it (the first sharer); a 409 reads the one there.
    2. One that is not proven gpuqueue's is Squatted (a failed start); one being deleted (its
       last sharer stopped) is transient: the next sync launches again, once it is gone.
    3. Add the Secret to its owners, at the resourceVersion read; a 409 reads it again."""
    namespace, name = spec.namespace, spec.shared_claim
    node, index = spec.shared_gpu
    seal = shared_claim_proof_of(namespace, name, backend.instance)
    body = ds.claim_manifest(
        name=name,
        namespace=namespace,
        node=node,
        index=index,
        device_class=spec.device_class,
        device_selector=spec.device_selector,
        strategy=spec.sharing_strategy or ds.STRATEGIES[0],
        instance=backend.instance,
        proof=seal,
        owner=owner,
    )
    resource = backend.resource
    for _ in range(TRIES):
        # 1.
        try:
            return _write(
                backend, "POST", _path(namespace), body, f"create {KIND} {namespace}/{name}"
            )
        except NotFound as exc:  # the team's namespace does not exist: no retry helps
            raise ClusterError(f"create {KIND} {namespace}/{name}: {exc}", transient=False) from exc
        except Conflict:
            claim = backend._get(KIND, resource.read_namespaced_resource_claim, namespace, name)
        if claim is None:
            continue  # deleted between the two calls: create it again
        # 2.
        if not proof.is_our_shared_claim(claim, namespace, name, seal):
            raise Squatted(
                f"ResourceClaim {namespace}/{name} exists and is not gpuqueue's: it is neither"
                " adopted nor deleted"
            )
        if ds.terminating(claim):
            raise ClusterError(
                f"the shared claim {namespace}/{name} is being deleted (its last sharer"
                " stopped): launched again once it is gone",
                transient=True,
            )
        # 3.
        if _uid(owner) in ds.owners(claim):
            return claim
        try:
            return _write(
                backend,
                "PUT",
                _path(namespace, name),
                ds.with_owner(claim, owner),
                f"add an owner to {KIND} {namespace}/{name}",
            )
        except (Conflict, NotFound):
            continue
    raise ClusterError(
        f"the shared claim {namespace}/{name} kept changing: launched again next sync",
        transient=True,
    )


def leave(backend: KubernetesBackend, namespace: str, secret_uid: str) -> None:
    """Take the attempt's Secret off every shared claim of `namespace` it owns; delete a claim
    it was the last owner of. A claim not proven gpuqueue's is left alone (and said)."""
    if not secret_uid:
        return
    resource = backend.resource
    selector = f"{MANAGED_BY}={MANAGED_BY_VALUE},{ds.LABEL_SHARED}"
    listed = backend.call(
        f"list shared resourceclaims in {namespace}",
        resource.list_namespaced_resource_claim,
        namespace,
        label_selector=selector,
        _preload_content=False,
        _request_timeout=backend.timeout,
    )
    for claim in json.loads(listed.data).get("items") or []:
        if secret_uid not in ds.owners(claim):
            continue
        name = str(claim["metadata"]["name"])
        seal = shared_claim_proof_of(namespace, name, backend.instance)
        if not proof.is_our_shared_claim(claim, namespace, name, seal):
            log.warning("resourceclaim %s/%s is not gpuqueue's: left alone", namespace, name)
            continue
        _leave_one(backend, claim, namespace, name, secret_uid)


def _leave_one(
    backend: KubernetesBackend, claim: Obj | None, namespace: str, name: str, secret_uid: str
) -> None:
    resource = backend.resource
    for _ in range(TRIES):
        if claim is None or secret_uid not in ds.owners(claim):
            return
        meta = claim["metadata"]
        try:
            if ds.owners(claim) == [secret_uid]:  # the last sharer: the claim goes
                options = client.V1DeleteOptions(
                    propagation_policy="Background",
                    preconditions=client.V1Preconditions(
                        uid=meta["uid"], resource_version=meta["resourceVersion"]
                    ),
                )
                with contextlib.suppress(NotFound):
                    backend.call(
                        f"delete {KIND} {namespace}/{name}",
                        resource.delete_namespaced_resource_claim,
                        name,
                        namespace,
                        body=options,
                        _preload_content=False,
                        _request_timeout=backend.timeout,
                    )
            else:
                with contextlib.suppress(NotFound):
                    _write(
                        backend,
                        "PUT",
                        _path(namespace, name),
                        ds.without_owner(claim, secret_uid),
                        f"remove an owner of {KIND} {namespace}/{name}",
                    )
            return
        except Conflict:  # another sharer joined or left meanwhile: read it again
            claim = backend._get(KIND, resource.read_namespaced_resource_claim, namespace, name)
    # Still changing: the garbage collector takes the reference off once the Secret is gone.
    log.warning("shared claim %s/%s kept changing; left to the garbage collector", namespace, name)
