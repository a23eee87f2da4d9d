from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from gpuqueue.models import Job
from gpuqueue.states import FINAL
from teams.models import Team

HTMX_STOP_POLLING = 286  # htmx stops polling on this status


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The jobs of the user's teams; the table polls itself while any job can still change."""
    jobs = list(
        Job.objects.visible_to(request.user)
        .select_related("team", "flavor", "user")
        .order_by("-submitted_at", "-id")[:100]
    )
    context = {
        "jobs": jobs,
        "teams": Team.objects.of_user(request.user),
        "live": any(job.state not in FINAL for job in jobs),
    }
    if request.htmx:
        response = render(request, "dashboard/partials/_job_table.html", context)
        if not context["live"]:
            response.status_code = HTMX_STOP_POLLING
        return response
    return render(request, "dashboard/home.html", context)
