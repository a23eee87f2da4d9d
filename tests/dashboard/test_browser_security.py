"""The dashboard under its Content-Security-Policy in a real headless Chromium: every page,
htmx's live updates included, loads with no violation; and sign-in is throttled."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.dashboard.test_browser import sign_in, submit_job, text_of, wait

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Installed before any script of each page runs, so that no violation goes unseen.
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || 'inline') + ' ' + e.sourceFile);
});
"""
PAGES = [
    "/",
    "/jobs/",
    "/jobs/new/",
    "/queues/",
    "/cluster/",
    "/utilization/",
    "/teams/",
    "/tokens/",
]


def test_every_page_loads_and_updates_live_without_a_csp_violation(
    browser: Any, service: Any
) -> None:
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_VIOLATIONS})
    sign_in(browser, service, "root")
    seen: dict[str, list[str]] = {}
    for page in PAGES:
        browser.get(f"{service.url}{page}")
        wait(browser, lambda b: b.execute_script("return document.readyState") == "complete")
        time.sleep(3)  # htmx polls and swaps parts of the page meanwhile
        assert browser.execute_script("return typeof htmx") == "object", page
        seen[page] = browser.execute_script("return window.__csp")
    assert seen == {page: [] for page in PAGES}


def test_the_pages_carry_the_policy(service: Any) -> None:
    import urllib.request

    with urllib.request.urlopen(f"{service.url}/accounts/login/", timeout=10) as response:
        policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy


def test_the_logs_panel_loads_follows_and_switches_worker_without_a_csp_violation(
    browser: Any, service: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_VIOLATIONS})
    sign_in(browser, service, "alice")
    job_id = submit_job(browser, service, "browser-logs", duration=600, workers="2")
    wait(browser, lambda b: "step 2 loss" in text_of(b, "log-lines"), timeout=90)
    assert "worker 0 of 2" in text_of(browser, "log-lines")
    Select(browser.find_element(By.ID, "log-worker")).select_by_value("1")
    wait(browser, lambda b: "worker 1 of 2" in text_of(b, "log-lines"))
    assert f"/jobs/{job_id}/" in browser.current_url  # swapped in place, no navigation
    assert browser.execute_script("return window.__csp") == []


# Last in this module: it locks this address out of signing in for the module's service.
def test_repeated_wrong_passwords_lock_the_sign_in_even_for_the_right_one(service: Any) -> None:
    import http.cookiejar
    import re
    import urllib.error
    import urllib.parse
    import urllib.request

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))

    def attempt(password: str) -> tuple[int, str]:
        page = opener.open(f"{service.url}/accounts/login/", timeout=10).read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token is not None
        body = urllib.parse.urlencode(
            {"username": "dave", "password": password, "csrfmiddlewaretoken": token.group(1)}
        ).encode()
        request = urllib.request.Request(
            f"{service.url}/accounts/login/", data=body, headers={"Referer": service.url}
        )
        try:
            with opener.open(request, timeout=10) as response:
                return response.status, response.url
        except urllib.error.HTTPError as exc:
            return exc.code, exc.url

    for _ in range(9):
        status, url = attempt("wrong")
        assert status == 200 and "/accounts/login/" in url  # the form again, with an error
    assert attempt("wrong")[0] == 429  # the tenth failure locks (GPUQUEUE_LOGIN_FAILURES)
    assert attempt("dave-gpuqueue")[0] == 429
