"""Team administration: quotas (site admins), members and roles (team admins), API tokens.

Every write goes through the services the API uses (gpuqueue.services.quotas.quotas,
teams.services), so the rules and the audit trail are the same whichever door is used.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from dashboard.forms import AllowedForm, MemberForm, QuotaForm, RoleForm, TokenForm
from dashboard.views.common import INVALID, htmx_redirect
from gpuqueue.core.errors import Forbidden, Refused
from gpuqueue.models import Flavor, Quota
from teams.models import ApiToken, AuditEntry, Membership, Team
from teams.services import (
    add_member,
    change_role,
    create_token,
    is_team_admin,
    remove_member,
    revoke_token,
)

AUDIT_ROWS = 50


def _visible_team(request: HttpRequest, slug: str) -> Team:
    # A team the user does not belong to is 404, like its jobs.
    return get_object_or_404(Team.objects.of_user(request.user), slug=slug)


def _quota_rows(team: Team, bound: dict[int, QuotaForm] | None = None) -> list[dict[str, Any]]:
    """One row per flavor, with the team's quota if it has one and a form for site admins."""
    quotas = {q.flavor_id: q for q in Quota.objects.filter(team=team)}
    rows = []
    for flavor in Flavor.objects.all():
        quota = quotas.get(flavor.pk)
        form = (bound or {}).get(flavor.pk) or QuotaForm(
            initial={
                "guarantee": quota.guarantee,
                "limit": quota.limit,
                "weight": f"{quota.weight:g}",
            }
            if quota
            else {"guarantee": 0, "limit": 0, "weight": 1},
            prefix=f"q{flavor.pk}",
        )
        rows.append({"flavor": flavor, "quota": quota, "form": form})
    return rows


def _team_context(request: HttpRequest, team: Team, **extra: Any) -> dict[str, Any]:
    admin = is_team_admin(request.user, team)
    context = {
        "team": team,
        "quota_rows": _quota_rows(team),
        "may_edit_quotas": request.user.is_superuser,
        "is_admin": admin,
        "memberships": list(team.memberships.select_related("user").order_by("user__username")),
        "member_form": MemberForm(),
        "allowed_form": AllowedForm(
            initial={field: ", ".join(getattr(team, field)) for field in AllowedForm.base_fields}
        ),
        "role_choices": RoleForm.base_fields["role"].choices,
        "audit": list(AuditEntry.objects.filter(team=team).select_related("actor")[:AUDIT_ROWS])
        if admin
        else [],
    }
    context.update(extra)
    return context


@login_required
@require_GET
def team_list(request: HttpRequest) -> HttpResponse:
    teams = Team.objects.of_user(request.user).prefetch_related("memberships")
    roles = dict(Membership.objects.filter(user=request.user).values_list("team_id", "role"))
    return render(
        request,
        "dashboard/teams.html",
        {
            "teams": [(team, roles.get(team.pk)) for team in teams],
        },
    )


@login_required
@require_GET
def team_detail(request: HttpRequest, slug: str) -> HttpResponse:
    team = _visible_team(request, slug)
    return render(request, "dashboard/team.html", _team_context(request, team))


@login_required
@require_POST
def quota_edit(request: HttpRequest, slug: str, flavor: str) -> HttpResponse:
    """Inline quota edit (site admins): the row comes back saved, or with the errors (the
    rules the API uses) and 422; the audit trail is refreshed out of band."""
    team = _visible_team(request, slug)
    flavor_obj = get_object_or_404(Flavor, name=flavor)
    if not request.user.is_superuser:
        return HttpResponse("Only a site admin may change quotas.", status=403)
    form = QuotaForm(data=request.POST, prefix=f"q{flavor_obj.pk}")
    try:
        saved = form.save_quota(request.user, team, flavor_obj)
    except Forbidden as exc:
        return HttpResponse(exc.message, status=403)
    if saved is not None:
        form = QuotaForm(
            initial={
                "guarantee": saved.guarantee,
                "limit": saved.limit,
                "weight": f"{saved.weight:g}",
            },
            prefix=f"q{flavor_obj.pk}",
        )
    row = {
        "flavor": flavor_obj,
        "form": form,
        "quota": Quota.objects.filter(team=team, flavor=flavor_obj).first(),
    }
    context = {
        "team": team,
        "row": row,
        "saved": saved is not None,
        "may_edit_quotas": True,
        "audit": list(AuditEntry.objects.filter(team=team).select_related("actor")[:AUDIT_ROWS]),
        "oob": True,
    }
    status = 200 if saved is not None else INVALID
    if request.htmx:
        return render(request, "dashboard/partials/_quota_row.html", context, status=status)
    if saved is not None:
        return htmx_redirect(request, reverse("dashboard:team", args=[team.slug]))
    bound = {flavor_obj.pk: form}
    return render(
        request,
        "dashboard/team.html",
        _team_context(request, team, quota_rows=_quota_rows(team, bound)),
        status=status,
    )


@login_required
@require_POST
def member_add(request: HttpRequest, slug: str) -> HttpResponse:
    team = _visible_team(request, slug)
    form = MemberForm(request.POST)
    if form.is_valid():
        user = get_user_model().objects.filter(username=form.cleaned_data["username"]).first()
        if user is None:
            form.add_error("username", "No user has this name.")
        else:
            try:
                add_member(request.user, team, user, form.cleaned_data["role"])
            except Forbidden as exc:
                return HttpResponse(exc.message, status=403)
            except Refused as exc:
                _refusal_on(form, exc)
            else:
                return htmx_redirect(request, reverse("dashboard:team", args=[team.slug]))
    return render(
        request,
        "dashboard/team.html",
        _team_context(request, team, member_form=form),
        status=INVALID,
    )


@login_required
@require_POST
def allowed_edit(request: HttpRequest, slug: str) -> HttpResponse:
    """What the team's jobs may use in its namespace (team admins and site admins)."""
    team = _visible_team(request, slug)
    form = AllowedForm(request.POST)
    try:
        saved = form.save_allowed(request.user, team)
    except Forbidden as exc:
        return HttpResponse(exc.message, status=403)
    if saved is not None:
        return htmx_redirect(request, reverse("dashboard:team", args=[team.slug]))
    return render(
        request,
        "dashboard/team.html",
        _team_context(request, team, allowed_form=form),
        status=INVALID,
    )


@login_required
@require_POST
def member_edit(request: HttpRequest, slug: str, membership_id: int) -> HttpResponse:
    """Change a member's role, or remove them (action=remove)."""
    team = _visible_team(request, slug)
    membership = get_object_or_404(
        team.memberships.select_related("user", "team"), pk=membership_id
    )
    try:
        if request.POST.get("action") == "remove":
            remove_member(request.user, membership)
        else:
            form = RoleForm(request.POST)
            if not form.is_valid():
                return render(
                    request,
                    "dashboard/team.html",
                    _team_context(request, team, member_error="Choose member or admin."),
                    status=INVALID,
                )
            change_role(request.user, membership, form.cleaned_data["role"])
    except Forbidden as exc:
        return HttpResponse(exc.message, status=403)
    except Refused as exc:
        return render(
            request,
            "dashboard/team.html",
            _team_context(request, team, member_error=exc.message),
            status=INVALID,
        )
    return htmx_redirect(request, reverse("dashboard:team", args=[team.slug]))


def _refusal_on(form: Any, exc: Refused) -> None:
    if exc.fields:
        for key, messages in exc.fields.items():
            for message in messages:
                form.add_error(key if key in form.fields else None, message)
    else:
        form.add_error(None, exc.message)


def _tokens(request: HttpRequest) -> list[ApiToken]:
    tokens = ApiToken.objects.select_related("user")
    if not request.user.is_superuser:
        tokens = tokens.filter(user=request.user)
    return list(tokens.order_by("-created_at")[:200])


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    """API tokens: yours (all of them for a site admin); a new secret is shown once, here."""
    form = TokenForm(request.POST or None)
    context: dict[str, Any] = {"form": form}
    status = 200
    if request.method == "POST":
        if form.is_valid():
            days = form.cleaned_data.get("expires_in_days")
            token, secret = create_token(
                request.user,
                name=form.cleaned_data["name"],
                actor=request.user,
                expires_at=timezone.now() + timedelta(days=days) if days else None,
            )
            context.update(created=token, secret=secret, form=TokenForm())
        else:
            status = INVALID
    context["tokens"] = _tokens(request)
    context["now"] = timezone.now()
    return render(request, "dashboard/tokens.html", context, status=status)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken.objects.select_related("user"), pk=token_id)
    if not request.user.is_superuser and token.user_id != request.user.pk:
        # Someone else's token does not exist for this user.
        return HttpResponse(status=404)
    revoke_token(request.user, token)
    return htmx_redirect(request, reverse("dashboard:tokens"))
