"""The overview at `/` and the job page in a real headless Chromium against the real embedded
service: the overview's figures and its refresh; old job-list links; the job page's times in
one shape in the viewer's zone; Resubmit into a filled-in form that submits."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.dashboard.test_browser import sign_in, text_of, wait
from tests.dashboard.test_browser_security import RECORD_VIOLATIONS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RECORD_ANSWERS = """
window.__answers = [];
document.addEventListener('htmx:afterRequest', (e) => window.__answers.push(e.detail.xhr.status));
"""


@pytest.fixture
def signed_in(browser: Any, service: Any) -> Any:
    browser.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_VIOLATIONS + RECORD_ANSWERS}
    )
    sign_in(browser, service, "alice")
    return browser


def test_the_overview_shows_gpus_my_jobs_and_why_free_gpus_stay_free(
    signed_in: Any, service: Any
) -> None:
    browser = signed_in
    token = service.token("alice")
    body = {
        "team": "team-a",
        "flavor": "h100",
        "name": "overview-sweep",
        "image": "ghcr.io/acme/train:1",
        "annotations": {"gpuqueue.dev/sim-duration-seconds": "600"},
        "array": "0-3%1",
    }
    array = service.api("POST", "/api/v1/arrays/", token, body)
    browser.get(f"{service.url}/")
    assert "Overview" in browser.title
    assert "h100" in text_of(browser, "flavors-now")
    # The cycle runs one task and holds three: the overview says so without a reload.
    browser.execute_script("window.__sameDocument = true")
    wait(browser, lambda b: "RUNNING" in text_of(b, "my-jobs"), timeout=60)
    wait(
        browser,
        lambda b: "held back by their users' own array limits" in text_of(b, "main"),
        timeout=30,
    )
    assert "truly idle" in text_of(browser, "main")
    assert browser.execute_script("return window.__sameDocument === true")
    assert 200 in browser.execute_script("return window.__answers")
    assert browser.execute_script("return window.__csp") == []
    # An old bookmark of the job list still opens it.
    browser.get(f"{service.url}/?state=pending")
    wait(browser, lambda b: "/jobs/?state=pending" in b.current_url)
    service.api("POST", f"/api/v1/arrays/{array['id']}/cancel/", token, {})


def test_the_job_page_writes_every_time_one_way_and_resubmits(signed_in: Any, service: Any) -> None:
    from selenium.webdriver.common.by import By

    browser = signed_in
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Europe/Berlin"})
    try:
        token = service.token("alice")
        body = {
            "team": "team-a",
            "flavor": "h100",
            "name": "oom-run",
            "image": "ghcr.io/acme/train:1",
            "command": ["python", "train.py", "--tag", "two words"],
            "annotations": {
                "gpuqueue.dev/sim-duration-seconds": "2",
                "gpuqueue.dev/sim-exit-code": "137",
            },
        }
        job = service.api("POST", "/api/v1/jobs/", token, body)
        browser.get(f"{service.url}/jobs/{job['id']}/")
        wait(browser, lambda b: text_of(b, "job-state") == "FAILED", timeout=90)
        assert "out of memory" in text_of(browser, "job-exit-hint")
        assert "failed: failed" not in text_of(browser, "main")
        # The logs panel is there at once, not after a second request.
        browser.get(f"{service.url}/jobs/{job['id']}/")
        assert browser.find_elements(By.ID, "log-lines") or browser.find_elements(
            By.ID, "log-problem"
        )
        time.sleep(1)
        texts = browser.execute_script(
            "return [...document.querySelectorAll('main time')].map((t) => t.textContent)"
        )
        assert len(texts) >= 3, texts
        shapes = {re.sub(r"\d", "9", t) for t in texts}
        assert shapes <= {"9999-99-99 99:99:99 CET", "9999-99-99 99:99:99 CEST"}, texts

        browser.find_element(By.ID, "clone-job").click()
        wait(browser, lambda b: "/jobs/new/?from=" in b.current_url)
        assert browser.find_element(By.ID, "id_name").get_attribute("value") == "oom-run"
        assert "'two words'" in browser.find_element(By.ID, "id_command").get_attribute("value")
        name = browser.find_element(By.ID, "id_name")
        name.clear()
        name.send_keys("oom-run-again")
        browser.find_element(By.ID, "submit-job").click()
        wait(browser, lambda b: "oom-run-again" in b.title, timeout=30)
    finally:
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})
