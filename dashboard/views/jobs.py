"""Jobs: the list, a job's page, cancel, submit."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from dashboard.array_and_dependency_fields import submit_job_or_array
from dashboard.clone import initial_from
from dashboard.forms import PRESETS, SubmitForm, curl_command
from dashboard.joblist import STATE_LABELS, JobFilter, held_task_note, job_page
from dashboard.sorting import headers
from dashboard.views.common import INVALID, htmx_redirect, page_or_partial
from dashboard.views.job_dependencies import dependencies_context
from gpuqueue.core.errors import Refused, Unavailable
from gpuqueue.core.job_order import DEFAULT
from gpuqueue.core.states import InvalidTransition, JobState
from gpuqueue.models import Flavor, Job
from gpuqueue.services.accounting.gpu_activity import finding_for, idle_job_ids
from gpuqueue.services.cluster.logs import read_job_log
from gpuqueue.services.jobs.cancel import CancelRefused, cancel_job, may_cancel
from gpuqueue.services.jobs.submit import SubmissionRefused
from teams.models import Team


@login_required
@require_GET
def job_list(request: HttpRequest) -> HttpResponse:
    """The jobs of the user's teams, filtered, an array as one row (`?expand=ID` shows its
    tasks under it); the table polls itself while a row can change."""
    job_filter = JobFilter.parse(request.GET)
    page = job_page(request.user, job_filter)
    context = {
        "page": page,
        "jobs": page.jobs,
        "toggles": {array_id: job_filter.toggled(array_id) for array_id in page.arrays},
        "filter": job_filter,
        "live": page.live,
        "idle_ids": idle_job_ids([job.pk for job in page.jobs]),
        "teams": Team.objects.of_user(request.user),
        "flavors": Flavor.objects.values_list("name", flat=True),
        "state_labels": STATE_LABELS,
        "next_query": job_filter.query(page.page + 1) if page.has_next else None,
        "prev_query": job_filter.query(page.page - 1) if page.page > 1 else None,
        "self_query": job_filter.query(page.page),
        # Each column's header and the link that sorts by it (back to the first page).
        "default_ordering": DEFAULT,
        "headers": [
            (h, job_filter.query(ordering=h.ordering)) for h in headers(job_filter.ordering)
        ],
    }
    return page_or_partial(
        request,
        "dashboard/home.html",
        "dashboard/partials/_job_table.html",
        context,
        live=page.live,
    )


def _visible_job(request: HttpRequest, job_id: int) -> Job:
    # Another team's job is 404, never 403: its existence is not the viewer's business.
    return get_object_or_404(
        Job.objects.visible_to(request.user).select_related(
            "team", "flavor", "user", "source", "standing"
        ),
        pk=job_id,
    )


@login_required
@require_GET
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    """A job: state, why it waits and when it should start, placement, attempts, timeline.
    The status block polls while the job can change and stops (286) once it is final."""
    job = _visible_job(request, job_id)
    context = {
        "job": job,
        "events": list(job.events.order_by("at", "id")),
        # The logs panel's first render (not for the status block's polls).
        **({} if getattr(request, "htmx", False) else log_context(job, 0)),
        "placement": job.placement_rows() if job.placement else [],
        "may_cancel": not job.is_final and may_cancel(request.user, job),
        "live": not job.is_final,
        **dependencies_context(request.user, job),
        "gpu_activity": finding_for(job),
        "slot": held_task_note(job),
    }
    return page_or_partial(
        request,
        "dashboard/job.html",
        "dashboard/partials/_job_status.html",
        context,
        live=context["live"],
    )


# The job page shows this many of a worker's last lines.
LOG_LINES = 50


def log_context(job: Job, worker: int) -> dict[str, object]:
    """The logs panel: one worker's last lines, or what keeps them from being read (not
    started, still starting, the cluster away)."""
    context: dict[str, object] = {"worker": worker, "workers": range(job.workers)}
    try:
        context["log"] = read_job_log(job, worker, tail=LOG_LINES)
    except (Refused, Unavailable) as exc:
        context["problem"] = exc.message
    return context


@login_required
@require_GET
def job_logs(request: HttpRequest, job_id: int) -> HttpResponse:
    """One worker's last lines (?worker=N), for the job page's panel; it polls while the job
    can still write and stops (286) once it is final. What keeps the lines from being read
    (not started, still starting, the cluster away) is said in the panel instead."""
    job = _visible_job(request, job_id)
    asked = request.GET.get("worker", "0")
    worker = int(asked) if asked.isdigit() and len(asked) < 10 else 0
    context = {"job": job, "live": not job.is_final, **log_context(job, worker)}
    return page_or_partial(
        request,
        "dashboard/job_logs.html",
        "dashboard/partials/_job_logs.html",
        context,
        live=not job.is_final,
    )


@login_required
@require_http_methods(["GET", "POST"])
def job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    """GET: a confirmation page (the browser without JavaScript); POST: cancel."""
    job = _visible_job(request, job_id)
    if not may_cancel(request.user, job):
        return render(
            request,
            "dashboard/cancel.html",
            {
                "job": job,
                "refused": "Only the job's owner, an admin of its team or a site admin "
                "may cancel it.",
            },
            status=403,
        )
    if request.method == "GET":
        if job.is_final:  # nothing to offer: say so, as a POST would
            ended = InvalidTransition(job.pk, job.state, JobState.CANCELLED).message
            return render(request, "dashboard/cancel.html", {"job": job, "refused": ended})
        return render(request, "dashboard/cancel.html", {"job": job})
    try:
        cancel_job(request.user, job, reason="cancelled from the dashboard")
    except CancelRefused as exc:
        return render(
            request, "dashboard/cancel.html", {"job": job, "refused": str(exc)}, status=403
        )
    except InvalidTransition as exc:
        return render(
            request, "dashboard/cancel.html", {"job": job, "refused": exc.message}, status=409
        )
    return htmx_redirect(request, reverse("dashboard:job", args=[job.pk]))


def _form_context(request: HttpRequest, form: SubmitForm) -> dict[str, object]:
    body = form.payload() if form.is_bound else _preset_body(form)
    return {
        "form": form,
        "presets": PRESETS,
        "curl": curl_command(request.build_absolute_uri("/"), body),
    }


def _preset_body(form: SubmitForm) -> dict[str, object]:
    # The curl for an unbound form: what the fields show now.
    return SubmitForm(data=_initial_data(form), user=form.user).payload()


def _initial_data(form: SubmitForm) -> dict[str, object]:
    data: dict[str, object] = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if name == "preemptible":
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = str(value)
    if "team" not in data and form.fields["team"].widget.choices:
        data["team"] = form.fields["team"].widget.choices[0][0]
    if "flavor" not in data and form.fields["flavor"].widget.choices:
        data["flavor"] = form.fields["flavor"].widget.choices[0][0]
    return data


@login_required
@require_http_methods(["GET", "POST"])
def submit(request: HttpRequest) -> HttpResponse:
    """The submit form: presets fill it (?preset=…), or a job to resubmit or clone
    (?from=ID), the rules the API uses check it, a failed form comes back with 422, a good
    one opens the new job's page."""
    if request.method == "GET":
        preset = PRESETS.get(request.GET.get("preset", ""), {})
        initial = {k: v for k, v in preset.items() if k != "title"}
        source = request.GET.get("from", "")
        if source:  # Resubmit / Clone: a job the viewer may see, else 404
            if not source.isdigit() or len(source) > 18:
                raise Http404("No such job.")
            source_job = _visible_job(request, int(source))
            initial = initial_from(source_job)
        if request.GET.get("team"):
            initial["team"] = request.GET["team"]
        form = SubmitForm(initial=initial, user=request.user)
        context = _form_context(request, form)
        context["source"] = source_job if source else None
        return page_or_partial(
            request, "dashboard/submit.html", "dashboard/partials/_submit_form.html", context
        )
    form = SubmitForm(data=request.POST, user=request.user)
    data = form.validated_submission()
    if data is not None:
        team, flavor = data.pop("team"), data.pop("flavor")
        try:
            page = submit_job_or_array(request.user, team, flavor, data)
        except SubmissionRefused as exc:
            form.add_error(exc.field if exc.field in form.fields else None, str(exc))
        else:
            return htmx_redirect(request, page)
    return page_or_partial(
        request,
        "dashboard/submit.html",
        "dashboard/partials/_submit_form.html",
        _form_context(request, form),
        status=INVALID,
    )


@login_required
@require_GET
def submit_curl(request: HttpRequest) -> HttpResponse:
    """The equivalent API request for the form as typed so far (htmx, on every change)."""
    form = SubmitForm(data=request.GET, user=request.user)
    body = form.payload()
    # What the API would refuse in it, at the same fields (nothing is written).
    form.validated_submission()  # the fields read alone, then the rules, as a submit would
    refused = form.errors
    return render(
        request,
        "dashboard/partials/_curl.html",
        {
            "curl": curl_command(request.build_absolute_uri("/"), body),
            "refused": [
                (form[name].label if name in form.fields else name, messages)
                for name, messages in refused.items()
            ],
        },
    )
