"""Pure reading of Dynamic Resource Allocation (resource.k8s.io/v1): the devices each node offers
a DRA flavor (ResourceSlices, filtered by the flavor's DeviceClass and selector) and those the
allocated ResourceClaims of others hold, in the snapshot's terms: {node: {resource: count}}.

A DRA flavor's resource name is gpuqueue's own (gpuqueue.core.gpu_resources.dra_resource_name):
the engine, quotas and the ledger count its devices as they count an extended resource's.
Input is the API's JSON (dicts, as listed); no I/O here.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuqueue.core.device_selector import DeviceView, Selector, SelectorError, Value, parse

log = logging.getLogger(__name__)

FINISHED_POD_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class DeviceFlavor:
    """What a DRA flavor asks of devices: its DeviceClass, and its own selector ("": none)."""

    resource_name: str
    device_class: str
    selector: str = ""


@dataclass(frozen=True, slots=True)
class Device:
    node: str
    driver: str
    pool: str
    name: str
    view: DeviceView

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


def _value(attribute: Mapping[str, Any]) -> Value | None:
    """A DeviceAttribute's one value (string, int, bool or version, as a string)."""
    for kind in ("string", "version"):
        if isinstance(attribute.get(kind), str):
            return str(attribute[kind])
    if isinstance(attribute.get("bool"), bool):
        return bool(attribute["bool"])
    if isinstance(attribute.get("int"), int):
        return int(attribute["int"])
    return None


def _qualified(name: str, driver: str) -> str:
    """An unqualified attribute name is in the driver's domain (as the API defines it)."""
    return name if "/" in name else f"{driver}/{name}"


def devices(slices: Iterable[Mapping[str, Any]]) -> list[Device]:
    """Every device of a node's ResourceSlices, from each pool's newest generation only (a
    driver replaces a pool by publishing a newer generation; the older slices linger until it
    deletes them). Devices not local to one node (network-attached, `allNodes`) are left out:
    a gang's worker needs them on its planned node."""
    from gpuqueue.cluster.inventory import amount  # the quantity parser, kept in one place

    newest: dict[tuple[str, str], int] = {}
    kept: list[Mapping[str, Any]] = []
    for one in slices:
        spec = one.get("spec") or {}
        pool = spec.get("pool") or {}
        if not spec.get("nodeName") or not spec.get("driver"):
            continue
        key = (str(spec["driver"]), str(pool.get("name", "")))
        generation = int(pool.get("generation") or 0)
        newest[key] = max(newest.get(key, generation), generation)
        kept.append(one)
    found: list[Device] = []
    for one in kept:
        spec = one["spec"]
        pool = spec.get("pool") or {}
        driver, pool_name = str(spec["driver"]), str(pool.get("name", ""))
        if int(pool.get("generation") or 0) < newest[(driver, pool_name)]:
            continue
        for device in spec.get("devices") or []:
            attributes = {
                _qualified(name, driver): value
                for name, attribute in (device.get("attributes") or {}).items()
                if (value := _value(attribute or {})) is not None
            }
            capacity = {
                _qualified(name, driver): amount((quantity or {}).get("value", 0), 1)
                for name, quantity in (device.get("capacity") or {}).items()
            }
            found.append(
                Device(
                    node=str(spec["nodeName"]),
                    driver=driver,
                    pool=pool_name,
                    name=str(device.get("name", "")),
                    view=DeviceView(driver, attributes, capacity),
                )
            )
    return found


def class_selectors(classes: Iterable[Mapping[str, Any]]) -> dict[str, Selector | None]:
    """Each DeviceClass's selectors as one (all must hold); None for a class whose CEL gpuqueue
    cannot evaluate: its devices are not counted (said in the log), rather than guessed."""
    found: dict[str, Selector | None] = {}
    for one in classes:
        name = str((one.get("metadata") or {}).get("name", ""))
        expressions = [
            str((selector.get("cel") or {}).get("expression", ""))
            for selector in (one.get("spec") or {}).get("selectors") or []
        ]
        try:
            parsed = [parse(text) for text in expressions]
        except SelectorError as exc:
            log.warning("DeviceClass %s: its selector is not evaluated by gpuqueue: %s", name, exc)
            found[name] = None
            continue
        found[name] = Selector(
            " && ".join(expressions), tuple(test for one in parsed for test in one.tests)
        )
    return found


def flavor_devices(
    flavor: DeviceFlavor, found: Iterable[Device], classes: Mapping[str, Selector | None]
) -> list[Device]:
    """The devices a claim of the flavor's request may get: its class's, then its selector's."""
    of_class = classes.get(flavor.device_class)
    if of_class is None:
        return []
    try:
        own = parse(flavor.selector)
    except SelectorError:
        return []  # refused when the flavor was saved; an older row counts nothing
    return [d for d in found if of_class(d.view) and own(d.view)]


@dataclass(frozen=True, slots=True)
class DraUse:
    """What the snapshot adds for DRA flavors, in the shapes of inventory.GpuUse."""

    capacity: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    external: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    draining: Mapping[str, Mapping[int, Mapping[str, int]]] = field(default_factory=dict)


PodKey = tuple[str, str]


def holders(claim: Mapping[str, Any]) -> list[PodKey]:
    """The pods a claim is reserved for, else the pod that owns it (a claim made from a pod's
    template before that pod is scheduled)."""
    meta = claim.get("metadata") or {}
    namespace = str(meta.get("namespace", ""))
    reserved = [
        (namespace, str(ref.get("name", "")))
        for ref in (claim.get("status") or {}).get("reservedFor") or []
        if ref.get("resource") == "pods"
    ]
    if reserved:
        return reserved
    return [
        (namespace, str(ref.get("name", "")))
        for ref in meta.get("ownerReferences") or []
        if ref.get("kind") == "Pod"
    ]


def allocated(claim: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [
        (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
        for r in (allocation.get("devices") or {}).get("results") or []
    ]


def dra_use(
    flavors: Collection[DeviceFlavor],
    slices: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    live: Collection[tuple[int, int]] | None = None,
    ours: Mapping[PodKey, tuple[int, int]] | None = None,
) -> DraUse:
    """Per node, the devices each DRA flavor may get, and of those the ones that allocated
    claims hold for anything but a live job's running worker (whose devices the database's
    placement counts), sorted out as inventory.gpu_use sorts out pods: a claim of a pod
    gpuqueue cannot prove it made is another's; a proven pod's claim comes back to its job
    only when the pod's attempt is no longer live."""
    if not flavors:
        return DraUse()
    found = devices(slices)
    by_class = class_selectors(classes)
    pod_state = {
        (str((p.get("metadata") or {}).get("namespace", "")), str(p["metadata"]["name"])): p
        for p in pods
        if (p.get("metadata") or {}).get("name")
    }
    # {device key: holder}: None for another's, else the (job, attempt) of gpuqueue's pod.
    held: dict[tuple[str, str, str], tuple[int, int] | None] = {}
    for claim in claims:
        results = allocated(claim)
        if not results:
            continue
        holder: tuple[int, int] | None = None
        counted = False
        for key in holders(claim) or [("", "")]:
            pod = pod_state.get(key)
            if pod is not None and (pod.get("status") or {}).get("phase") in FINISHED_POD_PHASES:
                continue  # done: the claim is about to be released
            attempt = (ours or {}).get(key)
            terminating = bool(((pod or {}).get("metadata") or {}).get("deletionTimestamp"))
            if attempt is not None and not terminating and (live is None or attempt in live):
                # A live job's worker: the database's placement counts it, for every sharer
                # of a shared GPU's claim (gpuqueue.cluster.dra_sharing) too.
                counted = False
                break
            counted = True
            if attempt is not None and not (live is not None and attempt in live):
                holder = attempt
        if counted:
            for key in results:
                held[key] = holder
    capacity: dict[str, dict[str, int]] = defaultdict(dict)
    external: dict[str, dict[str, int]] = defaultdict(dict)
    draining: dict[str, dict[int, dict[str, int]]] = defaultdict(dict)
    for flavor in flavors:
        name = flavor.resource_name
        for device in flavor_devices(flavor, found, by_class):
            on = capacity[device.node]
            on[name] = on.get(name, 0) + 1
            if device.key not in held:
                continue
            holder = held[device.key]
            if holder is None:
                out = external[device.node]
            else:
                out = draining[device.node].setdefault(holder[0], {})
            out[name] = out.get(name, 0) + 1
    return DraUse(capacity=dict(capacity), external=dict(external), draining=dict(draining))


def gate_room(
    flavors: Collection[DeviceFlavor],
    slices: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    counted: Collection[PodKey],
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """For the placement gate (gpuqueue.cluster.gates): per node, each DRA flavor's devices
    less those that allocated claims hold for pods other than `counted` (gpuqueue's workers,
    whose devices the gate counts by their annotation, gpuqueue.cluster.manifests
    DEVICES_ANNOTATION); and of those held, the ones only terminating pods hold (room that
    comes back by itself). A claim whose pods have all finished holds nothing."""
    if not flavors:
        return {}, {}
    pod_state = {
        (str((p.get("metadata") or {}).get("namespace", "")), str(p["metadata"]["name"])): p
        for p in pods
        if (p.get("metadata") or {}).get("name")
    }
    held: dict[tuple[str, str, str], bool] = {}  # device key -> only terminating pods hold it
    for claim in claims:
        results = allocated(claim)
        keys = holders(claim) or [("", "")]
        if not results or any(key in counted for key in keys):
            continue
        states = [pod_state.get(key) for key in keys]
        unfinished = [
            p
            for p in states
            if p is None or (p.get("status") or {}).get("phase") not in FINISHED_POD_PHASES
        ]
        if not unfinished:
            continue
        stopping = all(
            p is not None and (p.get("metadata") or {}).get("deletionTimestamp") for p in unfinished
        )
        for key in results:
            held[key] = stopping and held.get(key, True)
    found = devices(slices)
    by_class = class_selectors(classes)
    room: dict[str, dict[str, int]] = defaultdict(dict)
    coming: dict[str, dict[str, int]] = defaultdict(dict)
    for flavor in flavors:
        name = flavor.resource_name
        for device in flavor_devices(flavor, found, by_class):
            on = room[device.node]
            on[name] = on.get(name, 0) + (0 if device.key in held else 1)
            if held.get(device.key):
                back = coming[device.node]
                back[name] = back.get(name, 0) + 1
    return dict(room), dict(coming)
