"""A job's clock and attempts, the job page's panel that refreshes itself while the job can
still change."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from dashboard.views.common import page_or_partial
from gpuqueue.models import Job


@login_required
@require_GET
def job_progress(request: HttpRequest, job_id: int) -> HttpResponse:
    # Another team's job is 404, as its page is.
    job = get_object_or_404(Job.objects.visible_to(request.user), pk=job_id)
    partial = "dashboard/partials/_job_progress.html"
    live = not job.is_final
    context = {"job": job, "events": list(job.events.order_by("at", "id")), "live": live}
    return page_or_partial(request, partial, partial, context, live=live)
