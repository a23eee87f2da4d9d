"""What every dashboard view shares: page-or-partial rendering and the polling protocol."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

# htmx stops a polling element when the answer has this status (and still swaps it in).
HTMX_STOP_POLLING = 286
# A form that fails validation re-renders with this status (docs/architecture.md, "House
# rules"); base.html tells htmx to swap 422 answers in, as it does 2xx.
INVALID = 422


def page_or_partial(
    request: HttpRequest,
    page: str,
    partial: str,
    context: dict[str, Any],
    *,
    live: bool = True,
    status: int = 200,
) -> HttpResponse:
    """The whole page, or for an htmx request the partial that the page includes; a polled
    partial that can no longer change answers 286 so that the browser stops asking."""
    if getattr(request, "htmx", False) and not request.htmx.boosted:
        response = render(request, partial, context, status=status)
        if not live and status == 200:
            response.status_code = HTMX_STOP_POLLING
        return response
    return render(request, page, context, status=status)


def htmx_redirect(request: HttpRequest, url: str) -> HttpResponse:
    """Go to `url`: a full navigation for htmx (HX-Location would keep the old page's
    polling alive in some cases), a 303 for a plain form post."""
    from django.shortcuts import redirect

    if getattr(request, "htmx", False):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    response = redirect(url)
    response.status_code = 303
    return response
