"""A job array's page: its tasks counted by state, a grid of them coloured by state, and
cancel all or some (by index and state). Visibility and the right to cancel are a job's."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard.views.common import htmx_redirect, page_or_partial
from gpuqueue.core.states import FINAL, JobState, states_named
from gpuqueue.models import Job, JobArray
from gpuqueue.services.jobs.array_spec import ArraySpecError, parse_indices
from gpuqueue.services.jobs.arrays import (
    ArrayCancelRefused,
    cancel_tasks,
    may_cancel_array,
)


def _visible_array(request: HttpRequest, array_id: int) -> JobArray:
    # Another team's array is 404, as its jobs are.
    return get_object_or_404(
        JobArray.objects.visible_to(request.user).select_related("team", "user"), pk=array_id
    )


def _context(request: HttpRequest, array: JobArray, problem: str = "") -> dict[str, object]:
    tasks = list(
        Job.objects.filter(array=array)
        .order_by("array_index")
        .values_list("id", "array_index", "state")
    )
    counts = dict.fromkeys(JobState.values, 0)  # from the tasks read anyway: no second query
    for _, _, state in tasks:
        counts[state] += 1
    unfinished = sum(n for state, n in counts.items() if state not in FINAL)
    return {
        "array": array,
        "counts": [(state, counts[state]) for state in JobState.values],
        "tasks": tasks,
        "unfinished": unfinished,
        "may_cancel": unfinished > 0 and may_cancel_array(request.user, array),
        "live": unfinished > 0,
        "problem": problem,
    }


def _status(
    request: HttpRequest, array: JobArray, problem: str = "", status: int = 200
) -> HttpResponse:
    """The page, or its status block for htmx (286 once no task can change)."""
    context = _context(request, array, problem)
    return page_or_partial(
        request,
        "dashboard/array.html",
        "dashboard/partials/_array_status.html",
        context,
        live=bool(context["live"]),
        status=status,
    )


@login_required
@require_GET
def array_detail(request: HttpRequest, array_id: int) -> HttpResponse:
    """The page; its status block polls while a task can change and stops (286) after."""
    return _status(request, _visible_array(request, array_id))


@login_required
@require_POST
def array_cancel(request: HttpRequest, array_id: int) -> HttpResponse:
    """Cancel the unfinished tasks, or those of the indices and state given."""
    array = _visible_array(request, array_id)
    indices = None
    states = None
    problem = ""
    text = request.POST.get("indices", "").strip()
    if text:
        try:
            indices = parse_indices(text)
        except ArraySpecError as exc:
            problem = f"Indices: {exc}"
    state = request.POST.get("state", "").strip()
    if state and not problem:
        states = states_named(state)
        if states is None:
            problem = f"Unknown state {state!r}."
    if not problem:
        try:
            cancel_tasks(
                request.user,
                array,
                indices=indices,
                states=states,
                reason="cancelled from the dashboard",
            )
        except ArrayCancelRefused as exc:
            return _status(request, array, problem=str(exc), status=403)
        return htmx_redirect(request, reverse("dashboard:array", args=[array.pk]))
    return _status(request, array, problem=problem, status=422)
