"""Queues, the cluster map and utilization history: aggregates every signed-in user may read."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from dashboard.clustermap import cluster_map
from dashboard.history import WINDOWS, parse_window, utilization_history
from dashboard.overview import queue_overview
from dashboard.views.common import page_or_partial
from gpuqueue.core.states import HOLDING
from gpuqueue.models import Job
from gpuqueue.services.accounting.usage_report import idle_hours_by_team


@login_required
@require_GET
def queues(request: HttpRequest) -> HttpResponse:
    """Per flavor and team: guarantee, limit, fair share, allocated, borrowed, pending."""
    return page_or_partial(
        request,
        "dashboard/queues.html",
        "dashboard/partials/_queues.html",
        {"flavors": queue_overview()},
    )


@login_required
@require_GET
def cluster(request: HttpRequest) -> HttpResponse:
    """Nodes by flavor, one cell per GPU coloured by team; a cell links to its job only for
    viewers who may open that job."""
    visible = None
    if not request.user.is_superuser:
        visible = set(
            Job.objects.visible_to(request.user)
            .filter(state__in=HOLDING)
            .values_list("id", flat=True)
        )
    flavors, colours = cluster_map(visible)
    return page_or_partial(
        request,
        "dashboard/cluster.html",
        "dashboard/partials/_cluster.html",
        {"flavors": flavors, "colours": colours},
    )


@login_required
@require_GET
def utilization(request: HttpRequest) -> HttpResponse:
    window = parse_window(request.GET.get("window"))
    return page_or_partial(
        request,
        "dashboard/utilization.html",
        "dashboard/partials/_utilization.html",
        {
            "history": (history := utilization_history(window)),
            "windows": list(WINDOWS),
            "idle_by_team": idle_hours_by_team(history.start),
        },
    )
