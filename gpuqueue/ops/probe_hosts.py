"""/healthz and /metrics answer whatever Host they are asked with.

The kubelet's probes and Prometheus's scrapes address a web pod by its IP (or by `localhost`),
names no GPUQUEUE_ALLOWED_HOSTS list can know in advance, so Django's host check answered them
400: the web never became Ready and every scrape failed. The host check protects answers that
use the Host (absolute URLs, redirects, links in mails, caches keyed by host); these two echo
nothing of it, so a request for either with a Host the list refuses is answered here, straight
by its view, before any middleware that reads the Host. Its caller is anonymous: /healthz shows
the status alone, /metrics still wants its bearer token. With an allowed Host both go the
ordinary way.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port, validate_host

from gpuqueue.ops.health import healthz
from gpuqueue.ops.metrics import metrics_view

VIEWS: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": healthz,
    "/metrics": metrics_view,
}


class ProbeHostMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = VIEWS.get(request.path_info)
        if view is not None and not _allowed(request):
            return view(request)
        return self.get_response(request)


def _allowed(request: HttpRequest) -> bool:
    # What HttpRequest.get_host() checks, without its exception.
    host = request.META.get("HTTP_HOST") or request.META.get("SERVER_NAME", "")
    domain, _ = split_domain_port(host)
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return bool(domain) and validate_host(domain, allowed)
