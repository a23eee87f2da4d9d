"""GPU-hours from the ledger: per team and user, per flavor, per day, week or month, against
guarantee and fair share, top users, CSV export (the API's report,
services/accounting/usage_report.py). Site admins see every team, team admins their teams, others
their own usage."""

from __future__ import annotations

import csv

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from dashboard.views.common import INVALID, page_or_partial
from gpuqueue.models import Flavor
from gpuqueue.services.accounting.usage_report import (
    PERIODS,
    UsageFilterForm,
    csv_lines,
    may_see_teams,
    usage_report,
)
from teams.models import Team


@login_required
@require_GET
def usage(request: HttpRequest) -> HttpResponse:
    form = UsageFilterForm(request.GET)
    valid = form.is_valid()
    report = usage_report(request.user, form.cleaned_data) if valid else None
    if report is not None and request.GET.get("export") == "csv":
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="gpu-usage.csv"'
        csv.writer(response).writerows(csv_lines(report))
        return response
    query = request.GET.copy()
    query.pop("export", None)
    context = {
        "form": form,
        "report": report,
        "admin_view": may_see_teams(request.user),
        "teams": Team.objects.of_user(request.user),
        "flavors": Flavor.objects.values_list("name", flat=True),
        "periods": list(PERIODS),
        "csv_query": (query.urlencode() + "&" if query else "") + "export=csv",
    }
    return page_or_partial(
        request,
        "dashboard/usage.html",
        "dashboard/partials/_usage.html",
        context,
        live=False,
        status=200 if valid else INVALID,
    )
