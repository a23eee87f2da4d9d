"""Teams, memberships, tokens, audit log. Reads go through visibility filters (another
team's objects are not found); writes are one teams.services call each."""

from __future__ import annotations

from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from gpuqueue.api.pagination import NewestFirst, OldestFirst
from teams import services
from teams.api.filters import AuditFilter, MembershipFilter, TokenFilter
from teams.api.permissions import AnyAdmin, SiteAdminWrites, TeamAdminWrites
from teams.api.serializers import (
    AuditEntrySerializer,
    MembershipSerializer,
    TeamAllowedSerializer,
    TeamSerializer,
    TokenSerializer,
)
from teams.models import ApiToken, AuditEntry, Membership, Role, Team


class TeamViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """Members read their teams; site admins create and change any. Teams are not deleted
    through the API: their jobs and audit trail outlive a reorganisation."""

    queryset = Team.objects.none()  # for the schema; get_queryset filters
    serializer_class = TeamSerializer
    permission_classes = [SiteAdminWrites]
    pagination_class = OldestFirst
    lookup_field = "slug"

    def get_queryset(self) -> QuerySet[Team]:
        return Team.objects.of_user(self.request.user).select_related("parent")

    @extend_schema(request=TeamAllowedSerializer, responses=TeamAllowedSerializer)
    @action(
        detail=True,
        methods=["get", "put", "patch"],
        permission_classes=[TeamAdminWrites],
        serializer_class=TeamAllowedSerializer,
        pagination_class=None,
    )
    def allowed(self, request: Request, slug: str | None = None) -> Response:
        """What the team's jobs may use in its namespace: ServiceAccounts, Secrets and
        PersistentVolumeClaims. Members read it; team admins and site admins change it (PUT
        replaces every list, PATCH the lists it names)."""
        team = self.get_object()
        if request.method == "GET":
            return Response(TeamAllowedSerializer(team).data)
        data = request.data
        if request.method == "PUT" and isinstance(data, dict):
            data = {**dict.fromkeys(TeamAllowedSerializer.COLUMNS, []), **data}
        serializer = TeamAllowedSerializer(
            team,
            data=data,
            partial=request.method == "PATCH",
            context=self.get_serializer_context(),
        )
        serializer.is_valid(raise_exception=True)
        return Response(TeamAllowedSerializer(serializer.save()).data)


class MembershipViewSet(viewsets.ModelViewSet):
    """Members see their teams' memberships; team admins add, change and remove them."""

    queryset = Membership.objects.none()  # for the schema; get_queryset filters
    serializer_class = MembershipSerializer
    pagination_class = OldestFirst
    filter_backends = [DjangoFilterBackend]
    filterset_class = MembershipFilter
    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[Membership]:
        user = self.request.user
        memberships = Membership.objects.select_related("team", "user")
        if user.is_superuser:
            return memberships
        return memberships.filter(team__memberships__user=user)

    def perform_destroy(self, instance: Membership) -> None:
        services.remove_member(self.request.user, instance)


class TokenViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your API tokens (site admins: everyone's). The secret is in the create response only;
    DELETE revokes (the row stays for the audit trail)."""

    queryset = ApiToken.objects.none()  # for the schema; get_queryset filters
    serializer_class = TokenSerializer
    pagination_class = NewestFirst
    filter_backends = [DjangoFilterBackend]
    filterset_class = TokenFilter
    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[ApiToken]:
        user = self.request.user
        tokens = ApiToken.objects.select_related("user")
        return tokens if user.is_superuser else tokens.filter(user=user)

    def perform_destroy(self, instance: ApiToken) -> None:
        services.revoke_token(self.request.user, instance)


class AuditViewSet(viewsets.ReadOnlyModelViewSet):
    """Who changed which quota, membership, token, flavor or node, with before and after.
    Site admins read everything; team admins their teams' entries."""

    queryset = AuditEntry.objects.none()  # for the schema; get_queryset filters
    serializer_class = AuditEntrySerializer
    permission_classes = [AnyAdmin]
    pagination_class = NewestFirst
    filter_backends = [DjangoFilterBackend]
    filterset_class = AuditFilter
    lookup_value_regex = r"\d+"

    def get_queryset(self) -> QuerySet[AuditEntry]:
        user = self.request.user
        entries = AuditEntry.objects.select_related("actor", "team")
        if user.is_superuser:
            return entries
        admin_of = Membership.objects.filter(user=user, role=Role.ADMIN).values("team_id")
        return entries.filter(team_id__in=admin_of)
