"""The WSGI application: Django's, with a shorter middleware chain for token API requests.

Of the nine middleware in settings.MIDDLEWARE, six have nothing to do for a request to
/api/v1/ that authenticates with a token, sends no cookie and takes JSON; together they cost
about 7 % of a submission's CPU (0.30 M instructions of 4.05 M). Such a request goes through
the same middleware instances' classes minus those six (`SKIPPED`), in the same order, and
the same view; every other request takes the whole chain. Why each does nothing:

- WhiteNoise serves files under STATIC_URL only.
- Sessions, CSRF, authentication, messages: with no Cookie header there is no session, CSRF
  secret or stored message to read, and nothing reads or writes them: DRF authenticates with
  the token (its token class either accepts the Bearer/Token header or refuses it with 401;
  session authentication is never reached), sets the request's user itself, and every view
  under /api/v1/ is CSRF-exempt (tests/api/test_handler.py checks each route). A browser's
  request carries its session cookie and takes the whole chain.
- htmx: `request.htmx` is read by the dashboard only.
- The JSON condition keeps out DRF's browsable API (Accept: text/html or ?format=), whose page
  reads the CSRF token and the signed-in user.

The kept middleware (latency metrics, security headers, CommonMiddleware's host check and
Content-Length, X-Frame-Options) answer as in the whole chain. tests/api/test_handler.py
sends the same requests through both chains and compares status, headers and bodies.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.urls import set_urlconf
from django.utils.log import log_response
from django.utils.module_loading import import_string

SKIPPED = frozenset(
    {
        "whitenoise.middleware.WhiteNoiseMiddleware",
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
        "django_htmx.middleware.HtmxMiddleware",
    }
)
API_PREFIX = "/api/v1/"
_TOKEN_KEYWORDS = ("bearer", "token")  # gpuqueue.api.authentication.ApiTokenAuthentication's
_JSON_ACCEPT = (None, "*/*", "application/json")  # gpuqueue.api.negotiation's shortcut


def token_api_request(meta: dict[str, Any], path: str) -> bool:
    """A request the shorter chain serves: /api/v1/, a Bearer or Token Authorization header,
    no cookie, JSON (no Accept, */* or application/json; no format in the query string)."""
    if not path.startswith(API_PREFIX) or meta.get("HTTP_COOKIE"):
        return False
    if meta.get("HTTP_ACCEPT") not in _JSON_ACCEPT or "format" in meta.get("QUERY_STRING", ""):
        return False
    words = meta.get("HTTP_AUTHORIZATION", "").split()
    return bool(words) and words[0].lower() in _TOKEN_KEYWORDS


class _ShortChain(BaseHandler):
    """Django's handler with the middleware of settings.MIDDLEWARE less SKIPPED, built as
    BaseHandler.load_middleware builds a synchronous chain (every kept middleware can run
    synchronously; `build` returns False otherwise and the whole chain is used)."""

    def build(self) -> bool:
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        handler = convert_exception_to_response(self._get_response)
        for path in reversed(settings.MIDDLEWARE):
            if path in SKIPPED:
                continue
            middleware = import_string(path)
            if not getattr(middleware, "sync_capable", True):
                return False
            instance = middleware(handler)
            if hasattr(instance, "process_view"):
                self._view_middleware.insert(0, instance.process_view)
            if hasattr(instance, "process_template_response"):
                self._template_response_middleware.append(instance.process_template_response)
            if hasattr(instance, "process_exception"):
                self._exception_middleware.append(instance.process_exception)
            handler = convert_exception_to_response(instance)
        self._middleware_chain = handler
        return True


class ApiWSGIHandler(WSGIHandler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        short = _ShortChain()
        self._short: _ShortChain | None = short if short.build() else None

    def get_response(self, request: Any) -> Any:
        if self._short is None or not token_api_request(request.META, request.path_info):
            return super().get_response(request)
        # BaseHandler.get_response, through the shorter chain.
        set_urlconf(settings.ROOT_URLCONF)
        response = self._short._middleware_chain(request)
        response._resource_closers.append(request.close)
        if response.status_code >= 400:
            log_response(
                "%s: %s",
                response.reason_phrase,
                request.path,
                response=response,
                request=request,
            )
        return response
