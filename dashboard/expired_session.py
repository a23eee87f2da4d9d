"""An htmx request whose session has expired: one sign-in for the whole page, not a sign-in
form swapped into every polling region.

`login_required` answers any anonymous request with a redirect to the sign-in page; the browser
follows it inside htmx's request and htmx would swap the sign-in page into the region. For an
htmx request this middleware answers 401 instead, with the sign-in address (returning to the
page the user is on, not to the partial) in `X-Sign-In`; `static/session.js` saves the page's
forms marked `data-keep-through-sign-in` and navigates there once."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django.utils.http import url_has_allowed_host_and_scheme

SIGN_IN_HEADER = "X-Sign-In"


def page_path(request: HttpRequest) -> str:
    """The path and query of the page that sent the htmx request (HX-Current-URL), when it
    is on this site; else the site's front page."""
    current = request.headers.get("HX-Current-URL", "")
    if current and url_has_allowed_host_and_scheme(
        current, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        parts = urlsplit(current)
        return parts.path + (f"?{parts.query}" if parts.query else "")
    return "/"


def sign_in_url(request: HttpRequest) -> str:
    return f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': page_path(request)})}"


def is_sign_in_redirect(response: HttpResponse) -> bool:
    if response.status_code != 302:
        return False
    target = urlsplit(response.get("Location", "")).path
    return target == resolve_url(settings.LOGIN_URL)


class ExpiredSessionMiddleware:
    """After django_htmx's middleware (it sets `request.htmx`)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if getattr(request, "htmx", False) and is_sign_in_redirect(response):
            answer = HttpResponse("Your session has ended; sign in again.", status=401)
            answer[SIGN_IN_HEADER] = sign_in_url(request)
            return answer
        return response
