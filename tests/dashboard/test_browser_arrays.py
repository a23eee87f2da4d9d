"""The array page and the job page's dependencies in a real headless Chromium against the real
embedded service, under its Content-Security-Policy: counts and grid, cancelling some tasks
from the page, the polling that stops once every task has ended; a job's upstream and
downstream jobs with their states, and the cancellation that follows an unmet dependency."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.dashboard.test_browser import fill, sign_in, text_of, wait
from tests.dashboard.test_browser_security import RECORD_VIOLATIONS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Each htmx answer's status, kept on the window (a full navigation starts a new list).
RECORD_ANSWERS = """
window.__answers = [];
document.addEventListener('htmx:afterRequest', (e) => window.__answers.push(e.detail.xhr.status));
"""
UNFINISHED = {"PENDING", "ADMITTED", "RUNNING"}


def job_body(name: str, **more: Any) -> dict[str, Any]:
    # Long enough that nothing ends by itself while a test looks.
    return {
        "team": "team-a",
        "flavor": "h100",
        "name": name,
        "image": "ghcr.io/acme/train:1",
        "annotations": {"gpuqueue.dev/sim-duration-seconds": "600"},
        **more,
    }


@pytest.fixture(scope="module")
def token(service: Any) -> str:
    return str(service.token("alice"))


@pytest.fixture
def signed_in(browser: Any, service: Any) -> Any:
    browser.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_VIOLATIONS + RECORD_ANSWERS}
    )
    sign_in(browser, service, "alice")
    return browser


def cells(browser: Any) -> list[tuple[str, str]]:
    """The grid as (index, state class) per task, read in one script (htmx may swap it)."""
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#task-grid a.task')]"
        ".map((a) => [a.innerText, a.className.replace('task task-', '')])"
    )
    return [(str(i), str(s)) for i, s in rows]


def counts(browser: Any) -> dict[str, int]:
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#array-counts li')]"
        ".map((li) => [li.querySelector('.state').innerText, li.querySelector('strong').innerText])"
    )
    return {state: int(n) for state, n in rows}


def test_the_array_page_counts_cancels_some_tasks_and_stops_polling_once_all_ended(
    signed_in: Any, service: Any, token: str
) -> None:
    from selenium.webdriver.common.by import By

    browser = signed_in
    array = service.api("POST", "/api/v1/arrays/", token, job_body("sweep", array="0-5%2"))
    browser.get(f"{service.url}/arrays/{array['id']}/")
    assert [index for index, _ in cells(browser)] == ["0", "1", "2", "3", "4", "5"]
    assert sum(counts(browser).values()) == 6
    assert "at most 2 holding GPUs at once" in browser.page_source

    # Cancel two tasks by index: a confirmation, then the page shows them cancelled.
    fill(browser, "cancel-indices", "0-1")
    browser.find_element(By.ID, "cancel-tasks").click()
    alert = wait(browser, lambda b: b.switch_to.alert, timeout=10)
    assert f"Cancel these tasks of array {array['id']}" in alert.text
    alert.accept()
    wait(browser, lambda b: [s for _, s in cells(b)][:2] == ["cancelled", "cancelled"])
    assert all(state != "cancelled" for _, state in cells(browser)[2:])
    assert counts(browser)["CANCELLED"] == 2

    # The rest ended elsewhere (here: the API): the next poll shows it in place and answers
    # 286, and the section that replaces the polled one polls no more.
    browser.execute_script("window.__sameDocument = true")
    service.api("POST", f"/api/v1/arrays/{array['id']}/cancel/", token, {})
    wait(browser, lambda b: 286 in b.execute_script("return window.__answers"), timeout=15)
    assert {state for _, state in cells(browser)} == {"cancelled"}
    assert counts(browser)["CANCELLED"] == 6
    assert browser.execute_script("return window.__sameDocument === true")
    assert (
        browser.execute_script(
            "return document.getElementById('array-status').hasAttribute('hx-trigger')"
        )
        is False
    )
    assert not browser.find_elements(By.ID, "cancel-tasks")  # nothing left to cancel
    assert browser.execute_script("return window.__csp") == []


def test_the_job_page_links_upstream_and_downstream_jobs_and_shows_an_unmet_dependency(
    signed_in: Any, service: Any, token: str
) -> None:
    from selenium.webdriver.common.by import By

    browser = signed_in
    prep = service.api("POST", "/api/v1/jobs/", token, job_body("prep"))
    train = service.api("POST", "/api/v1/jobs/", token, job_body("train", after_ok=[prep["id"]]))

    browser.get(f"{service.url}/jobs/{train['id']}/")
    row = text_of(browser, "upstream")
    assert f"#{prep['id']} prep" in row and "after_ok" in row
    assert any(state in row for state in UNFINISHED)
    assert f"Waiting for job #{prep['id']} to succeed" in text_of(browser, "job-status")

    # Its upstream link leads to the job it waits for, whose page names it downstream.
    browser.find_element(By.CSS_SELECTOR, f'#upstream a[href="/jobs/{prep["id"]}/"]').click()
    wait(browser, lambda b: b.current_url.endswith(f"/jobs/{prep['id']}/"))
    row = text_of(browser, "downstream")
    assert f"#{train['id']} train" in row and "after_ok" in row and "PENDING" in row

    # prep cancelled: train's after_ok can never be met, so the cycle cancels it, saying why.
    service.api("POST", f"/api/v1/jobs/{prep['id']}/cancel/", token, {})
    service.wait_for(token, train["id"], "CANCELLED", timeout=30)
    browser.get(f"{service.url}/jobs/{train['id']}/")
    assert "CANCELLED" in text_of(browser, "upstream")
    assert text_of(browser, "job-state") == "CANCELLED"
    assert "a dependency can never be met" in text_of(browser, "timeline")
    assert browser.execute_script("return window.__csp") == []


def test_the_job_list_shows_an_array_as_one_row_that_expands_to_its_tasks(
    signed_in: Any, service: Any, token: str
) -> None:
    from selenium.webdriver.common.by import By

    browser = signed_in
    array = service.api(
        "POST",
        "/api/v1/arrays/",
        token,
        job_body("row-sweep", array="0-5%2", expected_runtime_seconds=600),
    )
    browser.get(f"{service.url}/jobs/")
    row = wait(
        browser, lambda b: b.find_element(By.CSS_SELECTOR, f'tr[data-array-id="{array["id"]}"]')
    )
    assert row.text.startswith(f"{array['id']}_[")
    assert not browser.find_elements(By.CSS_SELECTOR, "tr.task-row")
    # The cycle starts two tasks and holds four; the row counts them and says the limit.
    wait(
        browser,
        lambda b: (
            "2 running"
            in b.find_element(By.CSS_SELECTOR, f'tr[data-array-id="{array["id"]}"]').text
        ),
        timeout=60,
    )
    assert (
        "2 at a time"
        in browser.find_element(By.CSS_SELECTOR, f'tr[data-array-id="{array["id"]}"]').text
    )

    # Expanding swaps the table in place (no reload) and keeps the URL and the polling.
    browser.execute_script("window.__sameDocument = true")
    browser.find_element(By.CSS_SELECTOR, f'tr[data-array-id="{array["id"]}"] a.expand').click()
    wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "tr.task-row")) == 6)
    assert f"expand={array['id']}" in browser.current_url
    notes = [n.text for n in browser.find_elements(By.CSS_SELECTOR, "tr.task-row .task-note")]
    assert len(notes) == 4 and all("the array runs 2 at a time" in n for n in notes), notes
    assert any("starts as task 0 finishes" in n or "starts as task 1 finishes" in n for n in notes)
    time.sleep(4)  # a poll of the table comes and goes
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.task-row")) == 6
    assert browser.execute_script("return window.__sameDocument === true")
    assert browser.execute_script("return window.__csp") == []
    service.api("POST", f"/api/v1/arrays/{array['id']}/cancel/", token, {})
