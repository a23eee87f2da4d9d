"""No page asks another host for anything (fonts, scripts, images, validators): gpuqueue works
on a cluster without Internet access. Every request Chromium makes is read from its network
log (DevTools `Network.requestWillBeSent` events), not from what the page happened to load."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.dashboard.test_browser import sign_in, wait
from tests.dashboard.test_browser_security import PAGES

pytestmark = [pytest.mark.browser, pytest.mark.slow]

DOCS = ["/api/docs/", "/api/schema/", "/admin/"]
FIRST_JOB_LINK = """
const link = [...document.querySelectorAll('a[href^="/jobs/"]')]
  .find((a) => /^\\/jobs\\/\\d+\\/$/.test(a.getAttribute('href')));
return link ? link.getAttribute('href') : null;
"""


def requested_urls(browser: Any) -> list[str]:
    """The URLs of every request since the log was last read."""
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def elsewhere(urls: list[str], origin: str) -> list[str]:
    local = urlsplit(origin).netloc
    return [
        url
        for url in urls
        if urlsplit(url).scheme not in ("data", "blob", "about") and urlsplit(url).netloc != local
    ]


def test_no_page_makes_a_request_to_another_host(browser: Any, service: Any) -> None:
    browser.get_log("performance")  # what earlier tests left
    browser.get(f"{service.url}/accounts/login/")
    wait(browser, lambda b: b.execute_script("return document.readyState") == "complete")
    sign_in(browser, service, "root")
    seen: dict[str, list[str]] = {"/accounts/login/": requested_urls(browser)}
    job = browser.execute_script(FIRST_JOB_LINK)
    for page in [*PAGES, *DOCS, *([job] if job else [])]:
        browser.get(f"{service.url}{page}")
        wait(browser, lambda b: b.execute_script("return document.readyState") == "complete")
        time.sleep(2)  # htmx polls, Swagger UI fetches the schema
        seen[page] = requested_urls(browser)
    assert all(seen.values()), "the network log recorded nothing: the check would prove nothing"
    assert {page: elsewhere(urls, service.url) for page, urls in seen.items()} == {
        page: [] for page in seen
    }
