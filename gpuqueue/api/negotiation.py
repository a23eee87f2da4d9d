"""Content negotiation with a shortcut for what pipelines send.

DRF's negotiation parses every request header (`request.headers`) and the Accept list, and
matches it against each renderer, about 1 % of a submission's CPU. A request that sends no
Accept, `*/*` or `application/json`, and no `?format=`, gets the view's first renderer when
that is JSON: the answer DRF's own loop gives then (tests/api/test_negotiation.py compares
them). Everything else goes through DRF.
"""

from __future__ import annotations

from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation

_PLAIN_ACCEPT = (None, "*/*", "application/json")


class JsonFirstNegotiation(DefaultContentNegotiation):
    def select_renderer(
        self, request: Any, renderers: Any, format_suffix: str | None = None
    ) -> tuple[Any, str]:
        if (
            format_suffix is None
            and renderers
            and renderers[0].media_type == "application/json"
            and request.META.get("HTTP_ACCEPT") in _PLAIN_ACCEPT
            and self.settings.URL_FORMAT_OVERRIDE not in request.query_params
        ):
            return renderers[0], renderers[0].media_type
        return super().select_renderer(request, renderers, format_suffix)  # type: ignore[no-any-return]
