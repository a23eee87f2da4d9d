"""Flavor definitions, by site admins only; audited like quotas since they shape capacity."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from gpuqueue.core.errors import Forbidden, Refused
from gpuqueue.core.taints import toleration_errors
from gpuqueue.models import Flavor, Job
from teams.models import AuditEntry


def flavor_state(flavor: Flavor) -> dict[str, Any]:
    return {
        "name": flavor.name,
        "resource_name": flavor.resource_name,
        "node_selector": flavor.node_selector,
        "tolerations": flavor.tolerations,
        "cpu_millicores_per_gpu": flavor.cpu_millicores_per_gpu,
        "memory_mib_per_gpu": flavor.memory_mib_per_gpu,
        "max_cpu_millicores_per_worker": flavor.max_cpu_millicores_per_worker,
        "max_memory_mib_per_worker": flavor.max_memory_mib_per_worker,
        "description": flavor.description,
        "run_as_user": flavor.run_as_user,
        "run_as_group": flavor.run_as_group,
        "fs_group": flavor.fs_group,
        "allow_root": flavor.allow_root,
        "shareable": flavor.shareable,
        "slices_per_gpu": flavor.slices_per_gpu,
        "gpu_memory_mib": flavor.gpu_memory_mib,
        "fabric": flavor.fabric,
        "device_class": flavor.device_class,
        "device_selector": flavor.device_selector,
    }


def _sharing_changed(before: dict[str, Any], flavor: Flavor) -> bool:
    return (before["shareable"], before["slices_per_gpu"]) != (
        flavor.shareable,
        flavor.slices_per_gpu,
    )


def _require_site_admin(actor: Any) -> None:
    if not getattr(actor, "is_superuser", False):
        raise Forbidden("only a site admin may change flavors")


def save_flavor(actor: Any, flavor: Flavor | None, **fields: Any) -> Flavor:
    """Create (flavor None) or change a flavor; invalid tolerations are refused (400), and so
    is a change of how its GPUs are shared while active jobs ask fractions of them (409):
    their thousandths are whole slices of the sharing they were checked against."""
    _require_site_admin(actor)
    errors = toleration_errors(fields["tolerations"]) if "tolerations" in fields else []
    if errors:
        raise Refused("The tolerations are invalid.", fields={"tolerations": errors})
    with transaction.atomic():
        before = None
        if flavor is None:
            flavor = Flavor(**fields)
        else:
            flavor = Flavor.objects.select_for_update().get(pk=flavor.pk)
            before = flavor_state(flavor)
            for key, value in fields.items():
                setattr(flavor, key, value)
        if profile_errors := flavor.security_profile_errors():
            raise Refused("The security profile is invalid.", fields=profile_errors)
        if sharing_errors := flavor.sharing_errors():
            raise Refused("The sharing of its GPUs is invalid.", fields=sharing_errors)
        if before is not None and _sharing_changed(before, flavor):
            fractional = Job.objects.active().filter(flavor=flavor, gpu_milli__gt=0).count()
            if fractional:
                raise Refused(
                    f"{fractional} active job{'s' if fractional > 1 else ''} ask a fraction of "
                    f"a {flavor.name} GPU: its sharing cannot change until they end.",
                    fields={"slices_per_gpu": ["Fractional jobs of this flavor are active."]},
                    status=409,
                    code="in_use",
                )
        if fabric_errors := flavor.fabric_errors():
            raise Refused("The fabric is invalid.", fields={"fabric": fabric_errors})
        if device_errors := flavor.device_errors():
            raise Refused("The devices of the flavor are invalid.", fields=device_errors)
        if before is not None and bool(before["device_class"]) != flavor.is_dra:
            active = Job.objects.active().filter(flavor=flavor).count()
            if active:
                raise Refused(
                    f"{active} active job{'s' if active > 1 else ''} of {flavor.name} hold or "
                    "wait for its GPUs: whether they are DRA devices cannot change until they end.",
                    fields={"device_class": ["Jobs of this flavor are active."]},
                    status=409,
                    code="in_use",
                )
        flavor.save()
        AuditEntry.objects.create(
            actor=actor,
            action="flavor.create" if before is None else "flavor.update",
            object_type="flavor",
            object_repr=flavor.name,
            before=before,
            after=flavor_state(flavor),
        )
    return flavor


def delete_flavor(actor: Any, flavor: Flavor) -> None:
    """Remove a flavor; quotas and jobs protect it (ProtectedError, answered with 409)."""
    _require_site_admin(actor)
    with transaction.atomic():
        before = flavor_state(flavor)
        flavor.delete()
        AuditEntry.objects.create(
            actor=actor,
            action="flavor.delete",
            object_type="flavor",
            object_repr=before["name"],
            before=before,
            after=None,
        )
