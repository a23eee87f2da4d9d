"""A job's share of a GPU and the GPU models it may run on, checked against its flavor and the
flavor's nodes (job_spec.check_whole calls it for every way in).

A shared flavor's resource is the device plugin's shared one (time-slicing or MPS replicas):
`slices_per_gpu` of it per GPU, and a pod asks whole slices. So a fraction is a whole number
of slices, stored as thousandths of a GPU (`Job.gpu_milli`): k slices of n per GPU are
floor(k × 1000 / n) thousandths, which `Flavor.slices_for` turns back into k.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuqueue.cluster.base import GPU_MODEL_MAX_CHARS  # a label value's limit, as nodes report it
from gpuqueue.models import Flavor
from gpuqueue.services.cluster.inventory import flavor_nodes
from gpuqueue.services.jobs.validation import FieldErrors, length_errors

MAX_GPU_MODELS = 16
MAX_GPU_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB: no GPU has more
LISTED_AT_MOST = 12  # fractions named in a message before it abbreviates


def milli_of_slices(slices: int, slices_per_gpu: int) -> int:
    return slices * 1000 // slices_per_gpu


def whole_slice_millis(slices_per_gpu: int) -> list[int]:
    """The fractions of a GPU, in thousandths, that whole slices make (less than a GPU)."""
    return [milli_of_slices(k, slices_per_gpu) for k in range(1, slices_per_gpu)]


def _listed(millis: list[int]) -> str:
    if len(millis) > LISTED_AT_MOST:
        return f"{millis[0]}, {millis[1]}, … or {millis[-1]}"
    if len(millis) == 1:
        return str(millis[0])
    return f"{', '.join(map(str, millis[:-1]))} or {millis[-1]}"


def gpu_models_errors(models: list[str]) -> list[str]:
    """The list alone: short names, no repeats, not too many."""
    errors: list[str] = []
    if len(models) > MAX_GPU_MODELS:
        errors.append(f"At most {MAX_GPU_MODELS} GPU models; got {len(models)}.")
    for model in models:
        if not model.strip():
            errors.append("A GPU model name may not be empty.")
        errors += length_errors(model, GPU_MODEL_MAX_CHARS)
    if len(set(models)) != len(models):
        errors.append("Each GPU model is named once.")
    return errors


def flavor_gpu_models(flavor: Flavor) -> list[str]:
    """The GPU models the known nodes of `flavor` report, sorted."""
    return sorted({node.gpu_model for node in flavor_nodes(flavor) if node.gpu_model})


def share_errors(job: Mapping[str, Any], flavor: Flavor) -> tuple[dict[str, Any], FieldErrors]:
    """The job's fraction of a GPU (`gpu_milli`, or `gpu_memory_mib` turned into one) on its
    flavor: returns the values to store (gpu_milli) and the errors, by field.

    1. GPU memory asks the smallest whole number of slices that holds it; the flavor must be
       shared and know its GPUs' memory, and the job ask no fraction besides.
    2. A fraction needs a shared flavor, one GPU per worker, and whole slices; on a DRA
       flavor, one worker.
    """
    milli = int(job.get("gpu_milli") or 0)
    memory = job.get("gpu_memory_mib")
    slices = flavor.slices_per_gpu or 0
    if memory is not None:
        if milli:
            return {}, {"gpu_memory_mib": ["Ask either gpu_milli or gpu_memory_mib, not both."]}
        if not flavor.shareable:
            return {}, {"gpu_memory_mib": [_not_shared(flavor)]}
        if not flavor.gpu_memory_mib:
            return {}, {
                "gpu_memory_mib": [
                    f"Flavor {flavor.name} does not tell its GPUs' memory: ask a fraction of a "
                    f"GPU with gpu_milli ({_listed(whole_slice_millis(slices))})."
                ]
            }
        taken = -(-memory * slices // flavor.gpu_memory_mib)
        if taken >= slices:
            return {}, {
                "gpu_memory_mib": [
                    f"{memory} MiB is a whole {flavor.name} GPU or more (each has "
                    f"{flavor.gpu_memory_mib} MiB): ask whole GPUs with gpus_per_worker."
                ]
            }
        milli = milli_of_slices(taken, slices)
    if not milli:
        return {"gpu_milli": 0}, {}
    if not flavor.shareable:
        return {}, {"gpu_milli": [_not_shared(flavor)]}
    errors: FieldErrors = {}
    if int(job.get("gpus_per_worker") or 1) != 1:
        errors["gpus_per_worker"] = [
            "A worker that asks a fraction of a GPU takes one GPU: leave gpus_per_worker at 1."
        ]
    if flavor.device_class and int(job.get("workers") or 1) != 1:
        # A pod template is every worker's: the Job's pods could not each name their own
        # device's shared claim (gpuqueue/cluster/dra_sharing.py).
        errors["workers"] = [
            f"A fraction of a {flavor.name} GPU (a DRA device shared through one claim) is "
            "asked by one worker: leave workers at 1."
        ]
    if milli != milli_of_slices(flavor.slices_for(milli), slices):
        errors["gpu_milli"] = [
            f"{flavor.name} has {slices} slices per GPU: ask "
            f"{_listed(whole_slice_millis(slices))} thousandths."
        ]
    return {"gpu_milli": milli}, errors


def _not_shared(flavor: Flavor) -> str:
    shared = sorted(Flavor.objects.filter(shareable=True).values_list("name", flat=True))
    where = f" ({', '.join(shared)})" if shared else ""
    return (
        f"Flavor {flavor.name} does not share its GPUs: ask whole GPUs, or a shared flavor{where}."
    )


def model_errors(models: list[str], flavor: Flavor) -> FieldErrors:
    """Each model is one that nodes of the flavor report."""
    if not models:
        return {}
    known = flavor_gpu_models(flavor)
    if not known:
        return {
            "gpu_models": [
                f"No node of flavor {flavor.name} reports its GPU model (the node label "
                "nvidia.com/gpu.product), so a job cannot be bound to one."
            ]
        }
    unknown = [model for model in models if model not in known]
    if unknown:
        return {
            "gpu_models": [
                f"Flavor {flavor.name} has no node of GPU model {', '.join(unknown)}: its nodes "
                f"have {', '.join(known)}."
            ]
        }
    return {}
