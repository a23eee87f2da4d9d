"""The negotiation shortcut answers as DRF's own negotiation does."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from gpuqueue.api.negotiation import JsonFirstNegotiation

ACCEPTS = [
    None,
    "*/*",
    "application/json",
    "",
    "text/html",
    "text/html,application/json;q=0.9",
    "application/json; indent=4",
    "application/*",
    "image/png",
]


class YamlRenderer(JSONRenderer):
    media_type = "application/yaml"
    format = "yaml"


@pytest.mark.parametrize("accept", ACCEPTS)
@pytest.mark.parametrize("query", ["", "?format=api", "?format=json", "?x=1"])
@pytest.mark.parametrize(
    "renderers",
    [[JSONRenderer, BrowsableAPIRenderer], [BrowsableAPIRenderer, JSONRenderer], [YamlRenderer]],
)
def test_the_shortcut_answers_as_drf_does(accept: str | None, query: str, renderers: Any) -> None:
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    request = Request(APIRequestFactory().get("/api/v1/me/" + query, **headers))

    def answer(negotiation: Any) -> Any:
        try:
            renderer, media_type = negotiation.select_renderer(request, [r() for r in renderers])
        except Exception as exc:  # noqa: BLE001 - the same refusal counts as the same answer
            return type(exc).__name__
        return type(renderer), media_type

    assert answer(JsonFirstNegotiation()) == answer(DefaultContentNegotiation())


def test_the_api_uses_it(api: Any) -> None:
    from rest_framework.settings import api_settings

    assert api_settings.DEFAULT_CONTENT_NEGOTIATION_CLASS is JsonFirstNegotiation
    response = api("alice").get("/api/v1/me/")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    html = api("alice").get("/api/v1/me/", HTTP_ACCEPT="text/html")
    assert html.status_code == 200 and html["Content-Type"].startswith("text/html")
