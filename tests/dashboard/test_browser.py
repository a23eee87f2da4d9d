"""The dashboard in a real headless Chromium against the real embedded service: a job is
submitted in the form and seen to run and succeed on the simulated cluster without a reload;
a job is cancelled; a site admin edits a quota and sees the audit entry; a member cannot open
another team's job. A screenshot of every page lands in artifacts/screenshots/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots"
pytestmark = [pytest.mark.browser, pytest.mark.slow]

DEMO_PASSWORDS = {"alice": "alice-gpuqueue", "carol": "carol-gpuqueue", "root": "root-gpuqueue"}


def shot(browser: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    # The whole page, not just the window: resize to the document's height first.
    height = browser.execute_script("return document.documentElement.scrollHeight")
    width = browser.get_window_size()["width"]
    browser.set_window_size(width, max(600, min(int(height) + 120, 4000)))
    browser.save_screenshot(str(SHOTS / f"{name}.png"))
    browser.set_window_size(width, 1000)


def wait(browser: Any, condition: Any, timeout: float = 60) -> Any:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(
        browser,
        timeout,
        poll_frequency=0.3,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    ).until(condition)


def text_of(browser: Any, element_id: str) -> str:
    """The element's visible text, read in one script: htmx may swap the element between
    Selenium finding it and reading it, which chromedriver reports as a generic error."""
    from selenium.common.exceptions import NoSuchElementException

    text = browser.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.innerText : null",
        element_id,
    )
    if text is None:
        raise NoSuchElementException(f"no element #{element_id}")
    return str(text)


def sign_in(browser: Any, service: Any, username: str) -> None:
    from selenium.webdriver.common.by import By

    browser.delete_all_cookies()
    browser.get(f"{service.url}/accounts/login/")
    browser.find_element(By.ID, "id_username").send_keys(username)
    browser.find_element(By.ID, "id_password").send_keys(DEMO_PASSWORDS[username])
    browser.find_element(By.ID, "sign-in").click()
    wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, "nav.pages"))


def fill(browser: Any, field_id: str, value: str) -> None:
    from selenium.webdriver.common.by import By

    element = browser.find_element(By.ID, field_id)
    element.clear()
    element.send_keys(value)


def submit_job(browser: Any, service: Any, name: str, duration: int, workers: str = "1") -> int:
    """Fill the form from the notebook preset and submit; returns the new job's id."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(f"{service.url}/jobs/new/?preset=notebook")
    Select(browser.find_element(By.ID, "id_team")).select_by_value("team-a")
    Select(browser.find_element(By.ID, "id_flavor")).select_by_value("h100")
    fill(browser, "id_name", name)
    fill(browser, "id_workers", workers)
    fill(browser, "id_annotations", f"gpuqueue.dev/sim-duration-seconds={duration}")
    browser.find_element(By.ID, "submit-job").click()
    wait(browser, lambda b: "/jobs/new/" not in b.current_url and "/jobs/" in b.current_url)
    return int(browser.current_url.rstrip("/").rsplit("/", 1)[-1])


def test_sign_in_submit_and_watch_the_job_run_then_succeed(browser: Any, service: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{service.url}/")
    assert "/accounts/login/" in browser.current_url
    shot(browser, "login")
    sign_in(browser, service, "alice")

    # A refused form comes back inline, with the API's message, and nothing is created.
    browser.get(f"{service.url}/jobs/new/?preset=distributed")
    fill(browser, "id_workers", "0")
    browser.find_element(By.ID, "submit-job").click()
    wait(browser, lambda b: "greater than or equal to 1" in text_of(b, "error-workers"))
    assert "/jobs/new/" in browser.current_url
    shot(browser, "submit-with-errors")

    job_id = submit_job(browser, service, "browser-e2e", duration=5, workers="2")
    # A mark on the window: a reload would wipe it, so it proves the page updated itself.
    browser.execute_script("window.__sameDocument = true")
    wait(browser, lambda b: text_of(b, "job-state") == "RUNNING", timeout=90)
    assert "h100-" in text_of(browser, "job-status")  # the placement on nodes
    shot(browser, "job-running")
    wait(browser, lambda b: text_of(b, "job-state") == "SUCCEEDED", timeout=90)
    assert browser.execute_script("return window.__sameDocument === true")
    timeline = text_of(browser, "timeline")
    assert "ADMITTED → RUNNING" in timeline and "RUNNING → SUCCEEDED" in timeline
    shot(browser, "job-succeeded")

    browser.get(f"{service.url}/jobs/")
    wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{job_id}"]'))
    shot(browser, "jobs")


def test_cancel_a_job_with_confirmation(browser: Any, service: Any) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, service, "alice")
    job_id = submit_job(browser, service, "browser-cancel", duration=600)
    wait(browser, lambda b: text_of(b, "job-state") == "RUNNING", timeout=90)
    browser.find_element(By.ID, "cancel-job").click()
    alert = wait(browser, lambda b: b.switch_to.alert, timeout=10)
    assert f"Cancel job #{job_id}" in alert.text
    alert.accept()
    wait(browser, lambda b: text_of(b, "job-state") == "CANCELLED", timeout=30)
    assert "cancelled from the dashboard" in text_of(browser, "timeline")
    assert not browser.find_elements(By.ID, "cancel-job")


def test_a_member_cannot_open_another_teams_job(browser: Any, service: Any) -> None:
    sign_in(browser, service, "alice")
    job_id = submit_job(browser, service, "alices-secret", duration=5)
    sign_in(browser, service, "carol")
    browser.get(f"{service.url}/jobs/{job_id}/")
    assert "Not found" in browser.page_source and "Your jobs" in browser.page_source
    assert "alices-secret" not in browser.page_source
    browser.get(f"{service.url}/jobs/")
    assert "alices-secret" not in browser.page_source


def test_an_admin_edits_a_quota_and_sees_the_audit_entry(browser: Any, service: Any) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, service, "root")
    browser.get(f"{service.url}/teams/team-b/")
    row = browser.find_element(By.ID, "quota-h100")
    guarantee = row.find_element(By.CSS_SELECTOR, "input[name$='-guarantee']")
    guarantee.clear()
    guarantee.send_keys("60")
    row.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # Refused inline with the numbers (more than the cluster has), nothing saved.
    wait(browser, lambda b: "against a capacity of 64" in text_of(b, "quota-h100"), timeout=15)
    row = browser.find_element(By.ID, "quota-h100")
    guarantee = row.find_element(By.CSS_SELECTOR, "input[name$='-guarantee']")
    guarantee.clear()
    guarantee.send_keys("28")
    row.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda b: "Saved." in text_of(b, "quota-h100"))
    wait(browser, lambda b: "quota.update team-b/h100" in text_of(b, "audit"))
    assert "guarantee=24" in text_of(browser, "audit") and "guarantee=28" in text_of(
        browser, "audit"
    )
    shot(browser, "team-admin")


def write_samples(service: Any, minutes: int) -> None:
    """A utilization sample a minute for the last `minutes`, as the periodic task writes them."""
    subprocess.run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from datetime import timedelta\n"
            "from django.utils import timezone\n"
            "from gpuqueue.services.accounting.utilization import sample_utilization\n"
            "now = timezone.now()\n"
            f"[sample_utilization(now - timedelta(minutes=m)) for m in range({minutes}, -1, -1)]",
        ],
        cwd=ROOT,
        env=dict(service.env, GPUQUEUE_EMBEDDED="1"),
        check=True,
        capture_output=True,
    )


def test_screenshots_of_every_page(browser: Any, service: Any) -> None:
    """Pages with the jobs of the tests above, a minute's utilization samples, a token."""
    from selenium.webdriver.common.by import By

    write_samples(service, minutes=5)
    sign_in(browser, service, "alice")
    submit_job(browser, service, "long-run", duration=600, workers="3")
    pages = {
        "submit": "/jobs/new/?preset=training",
        "queues": "/queues/",
        "cluster": "/cluster/",
        "utilization": "/utilization/",
        "teams": "/teams/",
        "team": "/teams/team-a/",
    }
    for name, path in pages.items():
        browser.get(f"{service.url}{path}")
        wait(browser, lambda b: b.find_element(By.ID, "main"))
        shot(browser, name)
    browser.get(f"{service.url}/tokens/")
    fill(browser, "id_name", "nightly-pipeline")
    browser.find_element(By.CSS_SELECTOR, ".token-form button[type=submit]").click()
    wait(browser, lambda b: text_of(b, "token-secret").startswith("gq_"))
    shot(browser, "tokens")
    # Phone width: the same pages stay readable (no horizontal scroll of the page itself).
    browser.set_window_size(375, 800)
    try:
        for name, path in {
            "phone-jobs": "/",
            "phone-queues": "/queues/",
            "phone-cluster": "/cluster/",
        }.items():
            browser.get(f"{service.url}{path}")
            overflow = browser.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 1, (path, overflow)
            browser.save_screenshot(str(SHOTS / f"{name}.png"))
    finally:
        browser.set_window_size(1280, 1000)
    browser.get(f"{service.url}/utilization/")
    assert "GPU-hours" in text_of(browser, "idle-iron-total")
