"""`/`: the overview (dashboard/front_page.py). Old links to the job list, which `/` was
(`/?state=pending&team=…`), go on to `/jobs/` with their query."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.front_page import is_job_list_link, overview
from dashboard.views.common import page_or_partial


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The overview; its figures refresh every 10 s (htmx), the first render is whole."""
    if is_job_list_link(request.GET):
        return HttpResponseRedirect(f"{reverse('dashboard:jobs')}?{request.GET.urlencode()}")
    return page_or_partial(
        request,
        "dashboard/overview.html",
        "dashboard/partials/_overview.html",
        {"overview": overview(request.user, timezone.now())},
    )
