"""/api/v1/arrays/: submit a job array, read it with its tasks counted by state, list its
tasks, cancel all or some of them. Visibility and the right to cancel are a job's."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from gpuqueue.api.fields import StrictCharField, reject_unknown_fields
from gpuqueue.api.pagination import NewestFirst
from gpuqueue.api.serializers import JobSubmitSerializer
from gpuqueue.api.viewsets import IDEMPOTENCY_KEY, submit_once
from gpuqueue.core.states import states_named, unknown_state_message
from gpuqueue.models import Job, JobArray
from gpuqueue.services.jobs import array_spec
from gpuqueue.services.jobs.arrays import (
    ArrayCancelRefused,
    cancel_tasks,
    counts_by_array,
    counts_by_state,
    previous_array,
    submit_array,
)
from gpuqueue.services.jobs.dependencies import Dependencies

ARRAY_HELP = (
    'The tasks\' indices as Slurm writes them ("0-999%50": 1,000 tasks, at most 50 holding GPUs '
    'at once; "1,3,10-20:2"), or {"start", "end", "step", "max_concurrent", "values"} (values: '
    "one string per task, its GPUQUEUE_ARRAY_VALUE; alone, indices 0 to len - 1). At most "
    f"{array_spec.MAX_TASKS} tasks."
)


class ArraySubmitSerializer(JobSubmitSerializer):
    """A job's submission plus `array`; every task is that job (dependencies included)."""

    array = serializers.JSONField(help_text=ARRAY_HELP)

    def validate_array(self, value: Any) -> array_spec.ArraySpec:
        try:
            return array_spec.parse(value)
        except array_spec.ArraySpecError as exc:
            raise serializers.ValidationError(str(exc)) from exc


class ArraySerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)
    values = serializers.ListField(child=serializers.CharField(), read_only=True)
    counts = serializers.SerializerMethodField(help_text="tasks per state")

    class Meta:
        model = JobArray
        fields = [
            "id",
            "team",
            "user",
            "name",
            "spec",
            "size",
            "max_concurrent",
            "values",
            "idempotency_key",
            "submitted_at",
            "counts",
        ]
        read_only_fields = fields

    def get_counts(self, array: JobArray) -> dict[str, int]:
        known = self.context.get("counts", {}).get(array.pk)
        return known if known is not None else counts_by_state(array)


class ArrayCancelSerializer(serializers.Serializer):
    indices = StrictCharField(
        required=False, help_text='Only these tasks: "0-9,20" (default: all of them).'
    )
    states = serializers.ListField(
        child=StrictCharField(),
        required=False,
        help_text="Only tasks in these states (pending, running, active, … any case).",
    )

    def to_internal_value(self, data: Any) -> Any:
        reject_unknown_fields(self, data)
        return super().to_internal_value(data)

    def validate_indices(self, value: str) -> list[int]:
        try:
            return array_spec.parse_indices(value)
        except array_spec.ArraySpecError as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def validate_states(self, value: list[str]) -> set[str]:
        states: set[str] = set()
        for name in value:
            named = states_named(name)
            if named is None:
                raise serializers.ValidationError(unknown_state_message(name))
            states |= named
        return states


class TaskSerializer(serializers.Serializer):
    index = serializers.IntegerField(source="array_index")
    job = serializers.IntegerField(source="id")
    state = serializers.CharField()


class ArrayViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    queryset = JobArray.objects.none()  # for the schema; get_queryset filters
    serializer_class = ArraySerializer
    pagination_class = NewestFirst
    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[JobArray]:
        return JobArray.objects.visible_to(self.request.user).select_related("team", "user")

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        counts = counts_by_array([a.pk for a in page])
        serializer = ArraySerializer(page, many=True, context={"counts": counts})
        return self.get_paginated_response(serializer.data)

    @extend_schema(
        request=ArraySubmitSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: ArraySerializer,
            200: OpenApiResponse(ArraySerializer, description="an earlier submission, same key"),
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Submit N tasks of one job in one request; a retry with the same Idempotency-Key
        returns the first array (200)."""

        def submit(data: dict[str, Any], key: str | None, digest: str) -> tuple[JobArray, bool]:
            team, flavor, spec = data.pop("team"), data.pop("flavor"), data.pop("array")
            deps = Dependencies.take(data)
            result = submit_array(request.user, team, flavor, data, spec, deps, key, digest)
            return result.array, result.created

        return submit_once(
            request,
            ArraySubmitSerializer(data=request.data, context=self.get_serializer_context()),
            earlier=previous_array,
            submit=submit,
            present=lambda array: ArraySerializer(array).data,
        )

    @extend_schema(responses=TaskSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None)
    def tasks(self, request: Request, pk: str | None = None) -> Response:
        """Every task: its index, job id and state, in index order."""
        array = self.get_object()
        tasks = Job.objects.filter(array=array).order_by("array_index")
        return Response(TaskSerializer(tasks.only("id", "array_index", "state"), many=True).data)

    @extend_schema(request=ArrayCancelSerializer, responses=ArraySerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel the unfinished tasks, or those of `indices` and/or `states`: the submitter,
        a team admin or a site admin. Tasks already finished are left as they are."""
        array = self.get_object()
        body = ArrayCancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            cancel_tasks(
                request.user,
                array,
                indices=body.validated_data.get("indices"),
                states=body.validated_data.get("states"),
            )
        except ArrayCancelRefused as exc:
            raise PermissionDenied(str(exc)) from exc
        return Response(ArraySerializer(array).data)
