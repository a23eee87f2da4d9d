"""Closing a node to new work in gpuqueue (drain), independently of Kubernetes' cordon."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from gpuqueue.core.errors import Forbidden
from gpuqueue.models import Node
from teams.models import AuditEntry


def set_drained(actor: Any, node: Node, drained: bool) -> Node:
    """Drain (no new admissions; running gangs finish) or reopen a node; audited.

    Kubernetes' own cordon flag is mirrored from the cluster by the watcher and would be
    overwritten, so gpuqueue keeps its decision in `drained`.
    """
    if not getattr(actor, "is_superuser", False):
        raise Forbidden("only a site admin may drain or reopen nodes")
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        if node.drained != drained:
            before = {"drained": node.drained}
            Node.objects.filter(pk=node.pk).update(drained=drained)
            node.drained = drained
            AuditEntry.objects.create(
                actor=actor,
                action="node.drain" if drained else "node.undrain",
                object_type="node",
                object_repr=node.name,
                before=before,
                after={"drained": drained},
            )
    return node
