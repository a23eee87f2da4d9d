"""Entry points for jobs, flavors, quotas, nodes and utilization: a queryset (the visibility
helper), a serializer, a filterset; writes are one service call each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gpuqueue.api.array_summary_fields import attach
from gpuqueue.api.filters import EXPAND_TASKS, JobFilter, UtilizationSampleFilter
from gpuqueue.api.idempotency import body_digest, check_same_body
from gpuqueue.api.job_ordering import KeysetPagination
from gpuqueue.api.log_serializers import JobLogSerializer, LogQuerySerializer
from gpuqueue.api.pagination import OldestFirst, SamplesNewestFirst
from gpuqueue.api.serializers import (
    FlavorSerializer,
    FlavorUsageSerializer,
    JobDetailSerializer,
    JobEventSerializer,
    JobSerializer,
    JobSubmitSerializer,
    MeSerializer,
    NodeSerializer,
    QuotaSerializer,
    UtilizationSampleSerializer,
)
from gpuqueue.models import Flavor, Job, Node, Quota, UtilizationSample
from gpuqueue.services.cluster.inventory import usage_now
from gpuqueue.services.cluster.logs import read_job_log
from gpuqueue.services.cluster.nodes import set_drained
from gpuqueue.services.jobs.array_rows import array_summaries, one_row_per_array
from gpuqueue.services.jobs.cancel import cancel_job
from gpuqueue.services.jobs.dependencies import links, submit_job_after
from gpuqueue.services.jobs.submit import TeamRequired, previous_submission
from gpuqueue.services.quotas.flavors import delete_flavor
from gpuqueue.services.quotas.quotas import delete_quota
from teams.api.permissions import SiteAdminWrites
from teams.models import Membership

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Retries with the same key (same user) return the first job with 200, never a "
    "second job. At most 200 printable ASCII characters.",
)


def idempotency_key(request: Request) -> str | None:
    # From META: `request.headers` parses every header of the request on first use.
    key = request.META.get("HTTP_IDEMPOTENCY_KEY")
    if key is None:
        return None
    # Empty: sent empty, or a value the web server dropped (it passes on only ASCII); taking
    # it for "no key" would turn the client's retry into a second job.
    if not key or len(key) > 200 or not key.isprintable() or not key.isascii():
        raise serializers.ValidationError(
            {"Idempotency-Key": ["At most 200 printable ASCII characters."]}
        )
    return key


def submit_once(
    request: Request,
    submission: serializers.Serializer,
    *,
    earlier: Callable[[Any, str | None], Any],
    submit: Callable[[dict[str, Any], str | None, str], tuple[Any, bool]],
    present: Callable[[Any], Any],
) -> Response:
    """A submission's create: 201 with what `submit` made, or 200 with what an earlier request
    with the same Idempotency-Key and body made (`submit` returns it with False); 422 when
    the key was used with another body."""
    key = idempotency_key(request)
    digest = body_digest(request)
    if not submission.is_valid():
        # A retry gets what it already has even when its body would be refused now (the
        # cluster or the team may have changed since). A retry that validates is answered
        # by `submit`, whose insert does nothing for a used key.
        found = earlier(request.user, key)
        if found is not None:
            check_same_body(request, found, key, digest)
            return Response(present(found), status=status.HTTP_200_OK)
        raise serializers.ValidationError(submission.errors)
    try:
        made, created = submit(dict(submission.validated_data), key, digest)
    except TeamRequired as exc:  # as the serializer would have refused it
        raise serializers.ValidationError({"team": [str(exc)]}) from exc
    if not created:
        check_same_body(request, made, key, digest)
    return Response(
        present(made), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
    )


class JobViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    queryset = Job.objects.none()  # for the schema; get_queryset filters
    serializer_class = JobSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = JobFilter
    pagination_class = KeysetPagination  # ?ordering=
    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[Job]:
        return Job.objects.visible_to(self.request.user).select_related(
            "team", "flavor", "user", "source", "standing"
        )

    def filter_queryset(self, queryset: QuerySet[Job]) -> QuerySet[Job]:
        """The list shows an array as one row unless `?expand=tasks` (gpuqueue/api/filters.py)."""
        queryset = super().filter_queryset(queryset)
        if self.action == "list" and self.request.query_params.get("expand") != EXPAND_TASKS:
            queryset = one_row_per_array(queryset)
        return queryset

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        if request.query_params.get("expand") != EXPAND_TASKS:
            arrays = {job.array_id for job in page if job.array_id is not None}
            attach(page, array_summaries(arrays, timezone.now()))
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(
        request=JobSubmitSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: JobSerializer,
            200: OpenApiResponse(JobSerializer, description="an earlier submission, same key"),
        },
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        def submit(data: dict[str, Any], key: str | None, digest: str) -> tuple[Job, bool]:
            team, flavor = data.pop("team"), data.pop("flavor")  # team None: the only team
            result = submit_job_after(
                request.user, team, flavor, data, idempotency_key=key, idempotency_body=digest
            )
            return result.job, result.created

        return submit_once(
            request,
            JobSubmitSerializer(data=request.data, context=self.get_serializer_context()),
            earlier=previous_submission,
            submit=submit,
            present=lambda job: self.get_serializer(job).data,
        )

    @extend_schema(responses=JobDetailSerializer)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A job, with the jobs it waits for and those waiting for it (as far as you see)."""
        job = self.get_object()
        return Response({**self.get_serializer(job).data, **links(request.user, job)})

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel: the owner, a team admin or a site admin; 409 when already final."""
        job = cancel_job(request.user, self.get_object())
        return Response(self.get_serializer(job).data)

    @extend_schema(responses=JobEventSerializer(many=True), filters=False)
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The job's timeline: every transition with who, when and why."""
        job = self.get_object()
        return Response(JobEventSerializer(job.events.order_by("at", "id"), many=True).data)

    @extend_schema(parameters=[LogQuerySerializer], responses=JobLogSerializer, filters=False)
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def logs(self, request: Request, pk: str | None = None) -> Response:
        """The last lines of one worker's log, from the job's current or last attempt: 404
        when it has not started or its worker is gone, 503 (Retry-After) while the cluster
        cannot be reached."""
        job = self.get_object()
        query = LogQuerySerializer(data=request.query_params.dict(), context={"job": job})
        query.is_valid(raise_exception=True)
        return Response(JobLogSerializer(read_job_log(job, **query.validated_data)).data)


class FlavorViewSet(viewsets.ModelViewSet):
    queryset = Flavor.objects.all()
    serializer_class = FlavorSerializer
    permission_classes = [SiteAdminWrites]
    pagination_class = OldestFirst
    lookup_field = "name"

    def perform_destroy(self, instance: Flavor) -> None:
        delete_flavor(self.request.user, instance)


class QuotaViewSet(viewsets.ModelViewSet):
    """Every signed-in user reads quotas (they are cluster-wide figures); site admins write.
    POST for a team and flavor that already have a quota changes it (200)."""

    queryset = Quota.objects.select_related("team", "flavor")
    serializer_class = QuotaSerializer
    permission_classes = [SiteAdminWrites]
    pagination_class = OldestFirst
    lookup_value_regex = r"\d+"
    filterset_fields = {"team__slug": ["exact"], "flavor__name": ["exact"]}
    filter_backends = [DjangoFilterBackend]

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        quota = serializer.save()
        created = quota.change.created
        return Response(
            serializer.data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )

    def perform_destroy(self, instance: Quota) -> None:
        delete_quota(self.request.user, instance)


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """The inventory as the cluster watcher last saw it; site admins drain and reopen."""

    queryset = Node.objects.all()
    serializer_class = NodeSerializer
    permission_classes = [SiteAdminWrites]
    pagination_class = OldestFirst
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, name: str | None = None) -> Response:
        """Close the node to new work; running gangs finish."""
        node = set_drained(request.user, self.get_object(), True)
        return Response(NodeSerializer(node, context=self.get_serializer_context()).data)

    @extend_schema(request=None, responses=NodeSerializer)
    @action(detail=True, methods=["post"])
    def undrain(self, request: Request, name: str | None = None) -> Response:
        """Open the node to new work again."""
        node = set_drained(request.user, self.get_object(), False)
        return Response(NodeSerializer(node, context=self.get_serializer_context()).data)


class UtilizationView(APIView):
    """GPUs now, per flavor and team: capacity, allocated, pending. Aggregates only, so every
    signed-in user may read every team's figures (but not other teams' jobs)."""

    @extend_schema(responses=FlavorUsageSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(FlavorUsageSerializer(usage_now(), many=True).data)


class UtilizationHistoryViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Samples of allocated against capacity over time (team omitted = the whole cluster)."""

    queryset = UtilizationSample.objects.select_related("flavor", "team")
    serializer_class = UtilizationSampleSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = UtilizationSampleFilter
    pagination_class = SamplesNewestFirst


class MeView(APIView):
    """Who the token belongs to and their teams (the CLI's `whoami`)."""

    @extend_schema(responses=MeSerializer)
    def get(self, request: Request) -> Response:
        user = request.user
        teams = Membership.objects.filter(user=user).select_related("team").order_by("team__slug")
        return Response(
            MeSerializer(
                {
                    "username": user.get_username(),
                    "is_site_admin": user.is_superuser,
                    "teams": [{"team": m.team.slug, "role": m.role} for m in teams],
                }
            ).data
        )
