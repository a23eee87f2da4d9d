"""The GPUs that gpuqueue's terminating pods still hold on a node (`Node.draining`), as a reader
may see them: by job for the jobs the reader may read (`Job.objects.visible_to`: their own
teams', every job for a site admin), and as counts per resource, naming no job, for the rest."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpuqueue.models import Job, Node

# Where a list of nodes keeps the names of the jobs its reader may see, read once for the page.
NAMES = "draining_job_names"


def job_ids(nodes: Iterable[Node]) -> set[int]:
    """The ids of the jobs whose terminating pods hold GPUs on any of `nodes`."""
    ids = set()
    for node in nodes:
        for job in node.draining or {}:
            if str(job).isdigit():
                ids.add(int(job))
    return ids


def visible_names(user: Any, ids: set[int]) -> dict[int, str]:
    """Job id -> name, for those of `ids` that `user` may read (one query, none when empty)."""
    if not ids or user is None:
        return {}
    return dict(Job.objects.visible_to(user).filter(id__in=ids).values_list("id", "name"))


def draining_entries(
    draining: Mapping[str, Mapping[str, int]], names: Mapping[int, str]
) -> list[dict[str, Any]]:
    """One entry per job the reader may see and resource, by job id then resource; then, per
    resource, the GPUs of every other job together, with `job` and `job_name` null."""
    seen: list[dict[str, Any]] = []
    hidden: dict[str, int] = {}
    for job, by_resource in sorted((draining or {}).items(), key=lambda item: _order(item[0])):
        job_id = int(job) if str(job).isdigit() else None
        for resource, gpus in sorted((by_resource or {}).items()):
            count = int(gpus or 0)
            if count <= 0:
                continue
            if job_id is not None and job_id in names:
                seen.append(
                    {"job": job_id, "job_name": names[job_id], "resource": resource, "gpus": count}
                )
            else:
                hidden[resource] = hidden.get(resource, 0) + count
    others = [
        {"job": None, "job_name": None, "resource": resource, "gpus": gpus}
        for resource, gpus in sorted(hidden.items())
    ]
    return seen + others


def _order(job: str) -> tuple[int, str]:
    return (int(job), "") if str(job).isdigit() else (-1, str(job))


class DrainingEntrySerializer(serializers.Serializer):
    job = serializers.IntegerField(allow_null=True, help_text="null: a job you may not read")
    job_name = serializers.CharField(allow_null=True)
    resource = serializers.CharField(help_text="Kubernetes resource name, e.g. nvidia.com/gpu")
    gpus = serializers.IntegerField()


@extend_schema_field(DrainingEntrySerializer(many=True))
class DrainingField(serializers.Field):
    """A node's draining GPUs for the reader (`draining_entries`); a list of nodes reads the
    names of the jobs once for all of them (`NodeListSerializer`)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        kwargs.setdefault("source", "*")
        super().__init__(**kwargs)

    def to_representation(self, node: Node) -> list[dict[str, Any]]:
        names = self.context.get(NAMES)
        if names is None:
            names = visible_names(reader(self.context), job_ids([node]))
        return draining_entries(node.draining, names)


class NodeListSerializer(serializers.ListSerializer):
    def to_representation(self, data: Any) -> list[Any]:
        nodes = list(data.all() if hasattr(data, "all") else data)
        self.context[NAMES] = visible_names(reader(self.context), job_ids(nodes))
        return super().to_representation(nodes)


def reader(context: Mapping[str, Any]) -> Any:
    request = context.get("request")
    return getattr(request, "user", None)
